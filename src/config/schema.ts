import { z } from 'zod';
import { DEFAULT_IO_LIMITS, DEFAULT_OPEN_FILES_SHARE } from '../model/limits.js';

// The single source of truth for configuration: validation, defaults, and (through
// gen-doc.ts) docs/configuration.md. Key names follow CubeSandbox where it has them.
// `.meta({ restart: true })` marks fields that only take effect after a restart;
// `.describe()` text becomes the reference doc.

const ratio = (what: string) =>
  z
    .number({ error: `${what} must be a number` })
    .min(0, { error: 'must be between 0 and 1' })
    .max(1, { error: 'must be between 0 and 1' });

export const SandboxSpecSchema = z
  .object({
    cpus: z.number().positive().max(256).default(1).describe('vCPUs per sandbox (cfs quota = cpus x period)'),
    memory_mib: z.number().int().min(16).max(1048576).default(4096).describe('memory limit per sandbox in MiB'),
    disk_gib: z
      .number()
      .positive()
      .max(4096)
      .default(10)
      .describe(
        "writable layer size in GiB, enforced: the exclusive btrfs quota-group limit of the sandbox's subvolume (data and metadata), so a writer or a file flood gets EDQUOT inside the sandbox",
      ),
  })
  .strict();

/** One of cubelet sandbox_limits.io: 0 = not limited; a create may ask for less with the label cube.io.<name>. */
const ioLimit = (dflt: number, what: string, name: string) =>
  z
    .number()
    .int()
    .min(0)
    .max(2 ** 31 - 1)
    .default(dflt)
    .meta({ restart: true })
    .describe(`${what} per sandbox on the store's device, 0 = not limited; a create may ask for less with the metadata label cube.io.${name}=N`);

export const FILTER_NAMES = ['cpu', 'mem', 'disk', 'disk_quota', 'realtime_create_num', 'template_locality', 'mvm_num'] as const;
export const SCORER_NAMES = ['mvm_num', 'local_create_num', 'quota_cpu_usage', 'quota_mem_usage', 'template_locality', 'warm'] as const;

export const MasterConfigSchema = z
  .object({
    api: z
      .object({
        listen: z.string().default('127.0.0.1:3000').meta({ restart: true }).describe('address:port of the API (E2B REST, admin, envd); --listen overrides'),
        rate_limit_per_sec: z
          .number()
          .int()
          .min(0)
          .default(0)
          .describe('requests per second per API key, 0 = unlimited (the default: what is scarce is limited instead, below); excess gets 429 with Retry-After'),
        create_concurrency_per_key: z
          .number()
          .int()
          .min(1)
          .default(256)
          .describe(
            'creates (and resumes) in flight at once per API key; one more gets 429 with Retry-After, which the E2B SDK retries. Above scheduler.realtime_create_num (100 per node), so a burst one node takes is never refused by the key limit',
          ),
        max_sandboxes_per_key: z
          .number()
          .int()
          .min(1)
          .default(1000)
          .describe(
            "the sandboxes quota of an API key that sets none of its own (`cubectl key set NAME --sandboxes N`): sandboxes running or starting at once per key, counted in the state store so every control replica admits the same; one more create gets 429 (code 130481) with Retry-After naming the quota, which the E2B SDK retries before raising RateLimitError. Paused sandboxes do not count. E2B's own plans allow 20 to 100; 1000 keeps one key from filling a small cluster (3000 per node at most) without limiting a single-team RL fleet",
          ),
        auth_failures_per_sec: z
          .number()
          .int()
          .min(1)
          .default(20)
          .describe(
            'requests with a missing or wrong API key, access token or signature allowed per second per source address (burst of the same size); beyond that 429 with Retry-After, before any lookup',
          ),
        sandbox_domain: z.string().default('').describe('domain for <port>-<sandboxID>.<domain> routing; empty = not advertised'),
        dns: z
          .object({
            listen: z
              .string()
              .default('')
              .meta({ restart: true })
              .describe(
                'address:port (UDP and TCP) where cubed answers DNS for api.sandbox_domain and *.<sandbox_domain> itself, e.g. 127.0.0.1:5354; empty = off (the default). Not a resolver: other names are refused (docs/e2b.md, docs/security.md)',
              ),
            answer: z
              .array(z.union([z.ipv4(), z.ipv6()]))
              .max(4)
              .default([])
              .meta({ restart: true })
              .describe(
                "the addresses (at most 4) the names resolve to, A for IPv4 and AAAA for IPv6: this process's API and port proxy as clients reach it. Empty = the address of api.listen (--listen), which must then be an IP address other than 0.0.0.0 or ::",
              ),
            ttl_sec: z.number().int().min(0).max(3600).default(5).describe('TTL of the answers (and of negative answers, through the SOA)'),
            queries_per_sec_per_source: z
              .number()
              .int()
              .min(0)
              .default(100)
              .describe('queries answered per second per source address (burst of the same size); beyond that they are dropped unanswered; 0 = unlimited'),
          })
          .strict()
          .prefault({}),
      })
      .strict()
      .prefault({}),
    scheduler: z
      .object({
        priority_select_num: z.number().int().min(1).default(3).describe('pick at random among the top N scored nodes (spreads load, avoids hot spots)'),
        candidate_limit: z
          .number()
          .int()
          .min(0)
          .default(100)
          .describe(
            'score at most this many nodes that pass the filters per decision, visited from a random starting node (as Nomad limits its candidates); 0 scores every node. Below this many nodes every one is scored',
          ),
        node_max_mvm_num: z.number().int().min(1).default(3000).describe('hard cap of sandboxes per node (running + paused)'),
        node_max_mem_reserved_in_mb: z.number().int().min(0).default(10240).describe('host memory kept out of the sandbox budget, MiB'),
        node_max_cpu_util: z
          .number()
          .gt(0)
          .max(100)
          .default(80)
          .describe(
            "CPU utilisation cap in percent: applied to the oversold CPU quota, and a node whose sandboxes' CPU use (their cgroups, averaged over about 30 s; other processes on the host do not count) is at or above it takes no new sandboxes until it drops (503 with Retry-After)",
          ),
        disk_usage_max_percent: z
          .number()
          .gt(0)
          .max(100)
          .default(80)
          .describe('disk watermark: a node whose data disk is at or above it takes no new sandboxes'),
        realtime_create_num: z.number().int().min(1).default(100).describe('in-flight creates allowed per node'),
        heartbeat_timeout_ms: z
          .number()
          .int()
          .min(100)
          .default(3000)
          .describe('a node whose metrics are older than this is filtered out and, in a cluster, marked lost'),
        filter: z
          .object({
            enable_filters: z
              .array(z.enum(FILTER_NAMES))
              .default([...FILTER_NAMES])
              .describe('filters a node must pass'),
          })
          .strict()
          .prefault({}),
        score: z
          .object({
            enable_scorers: z
              .array(z.enum(SCORER_NAMES))
              .default([...SCORER_NAMES])
              .describe('scorers summed (weighted) into a 0-100 score'),
            // Partial: a file written before template_locality existed names four weights and stays valid (a weight left out is 0).
            resource_weights: z
              .partialRecord(z.enum(SCORER_NAMES), z.number().min(0))
              .default({ mvm_num: 2, local_create_num: 3, quota_cpu_usage: 1, quota_mem_usage: 1, template_locality: 3, warm: 3 })
              .describe('weight per scorer (a scorer left out weighs 0)'),
            plugin_conf: z.record(z.string(), z.record(z.string(), z.unknown())).default({}).describe('free-form per-scorer settings'),
          })
          .strict()
          .prefault({}),
        overhead: z
          .object({
            vm_memory_overhead_base_mib: z.number().min(0).default(42).describe('fixed per-sandbox memory overhead, MiB'),
            vm_memory_overhead_coefficient: z.number().positive().default(64).describe('per-sandbox overhead adds memory / coefficient'),
          })
          .strict()
          .prefault({}),
      })
      .strict()
      .prefault({}),
    host: z
      .object({
        quota: z
          .object({
            mem_oversell_ratio: z.number().min(1).max(100).default(2).describe('memory oversell factor'),
            cpu_oversell_ratio: z.number().min(1).max(100).default(3).describe('CPU oversell factor'),
            disk_oversell_ratio: z
              .number()
              .gt(0)
              .max(100)
              .default(20)
              .describe(
                "sandbox store oversell factor: the disk_gib quotas of a node's sandboxes (paused ones too: their layers stay) may add up to the store's size times this (the disk_quota filter), and a sandbox asking for more than the store's size (times this when it is below 1) is refused with 400. 20 lets 20 sandboxes of the default 10 GiB spec onto a 10 GiB store (the default image is half the data dir filesystem's free space); writable layers mostly hold megabytes of their quota, and the disk watermark guards what they really write. 1 or less: no sandbox can fill the store for its neighbours",
              ),
            paused_resource_release_ratio: ratio('paused_resource_release_ratio')
              .default(0)
              .describe("share of a paused sandbox's cpu and memory given back (0 = resume guaranteed, 1 = best effort)"),
          })
          .strict()
          .prefault({}),
        detected: z
          .object({
            cpu_oversell_ratio: z
              .number()
              .min(1)
              .max(100)
              .default(16)
              .describe(
                "CPU oversell factor of a node whose capacity is read from the host (no [quota] in cubelet.toml): a sandbox's vCPUs are a cap, not a reservation, and the live gate on what sandboxes use keeps the node under node_max_cpu_util",
              ),
            mem_oversell_ratio: z
              .number()
              .min(1)
              .max(100)
              .default(6)
              .describe(
                'memory oversell factor of a node whose capacity is read from the host; such a node also takes no sandbox while MemAvailable is under its reserve',
              ),
            mem_reserved_percent: z
              .number()
              .gt(0)
              .max(90)
              .default(25)
              .describe('host memory reserve of such a node: the smaller of scheduler.node_max_mem_reserved_in_mb and this share of its memory'),
          })
          .strict()
          .prefault({})
          .describe(
            'a development box: nodes whose capacity is not declared; declared nodes keep the reference model (host.quota, node_max_mem_reserved_in_mb)',
          ),
      })
      .strict()
      .prefault({}),
    sandbox: z
      .object({
        default_spec: SandboxSpecSchema.prefault({}).describe('spec used when a create names none; also the spec the density figures are computed for'),
        default_template: z.string().min(1).default('host').describe('template used for templateID "base" or when none is named'),
        default_timeout_sec: z.number().int().min(1).default(300).describe('sandbox lifetime when a create names none'),
        max_timeout_sec: z
          .number()
          .int()
          .min(1)
          .default(86400)
          .describe('longest lifetime a create, setTimeout or connect may ask for, in seconds (longer is refused with 400)'),
        pids_max: z.number().int().min(8).default(1024).describe('process limit per sandbox (fork bombs stop here)'),
        ready_timeout_sec: z
          .number()
          .int()
          .min(1)
          .max(50)
          .default(30)
          .describe(
            "how long a template's ready command is tried, at its build (E2B Template.build: the build fails with its output) and at each create from a template that sets no --ready-timeout of its own (the create fails with 422 and its output). Under the E2B SDK's 60 s request timeout with room for the create itself, so a client gets the output, not a timeout",
          ),
        create_deadline_sec: z
          .number()
          .int()
          .min(1)
          .max(50)
          .default(10)
          .describe(
            "how long a create waits for the node it placed the sandbox on (a create fetching layers there counts as answering while bytes come): a node silent that long (frozen, overloaded) is given up, the create placed on another node, and what the late node makes is destroyed when it reports (it also refuses a create that reaches it after this deadline). Well under the E2B SDK's 60 s request timeout, so a client gets an answer",
          ),
        call_deadline_sec: z
          .number()
          .int()
          .min(1)
          .max(300)
          .default(30)
          .describe(
            'how long the control plane waits for a node to answer any other call on a sandbox (pause, resume, set-timeout, exec, files, destroy): a node silent that long is answered for with 503 (130596), and a call that reaches it later than that is refused there, not carried out',
          ),
      })
      .strict()
      .prefault({}),
    volumes: z
      .object({
        default_gib: z
          .number()
          .positive()
          .max(16384)
          .default(1)
          .describe(
            "size limit of a volume whose create names none (E2B's Volume.create sends only a name), in GiB: the exclusive btrfs quota-group limit of its subvolume (data and metadata); a write over it fails with 413 (130431), and a size over the store's free space is refused with 400 (130432)",
          ),
      })
      .strict()
      .prefault({}),
  })
  .strict();

/** The default of cubelet.storage.layer_unpack_max_gib (also what a template store made without a config uses). */
export const LAYER_UNPACK_MAX_GIB = 32;

export const CubeletConfigSchema = z
  .object({
    node_id: z.string().default('').meta({ restart: true }).describe('node name; empty = the host name; --node-id overrides'),
    data_dir: z.string().default('/var/lib/cubed').meta({ restart: true }).describe('sandboxes, templates and embedded state; --data-dir overrides'),
    runtime: z
      .union([z.enum(['ns', 'microvm', 'sim']), z.array(z.enum(['ns', 'microvm'])).min(1)])
      .default('ns')
      .meta({ restart: true })
      .describe(
        'runtime driver, or the list a node offers (the first is the default; a create picks another with --runtime or the metadata label cube.runtime); sim only for scheduler benchmarks',
      ),
    microvm: z
      .object({
        boot_timeout_sec: z
          .number()
          .int()
          .min(5)
          .max(600)
          .default(90)
          .meta({ restart: true })
          .describe('a microVM whose guest agent has not answered by then is a failed create (its console tail is in the error)'),
        snapshots: z
          .boolean()
          .default(true)
          .meta({ restart: true })
          .describe(
            'create microVMs from per-shape memory snapshots (a restore instead of a boot); false: every create boots cold (to measure it, or so no guest starts from memory another guest had)',
          ),
        console_log_kib: z
          .number()
          .int()
          .min(4)
          .max(1024 * 1024)
          .default(1024)
          .meta({ restart: true })
          .describe(
            "a microVM's serial console (and QEMU's own messages) on the host: console.log, rotated to console.log.1 at this size, so a guest writing to its console holds at most twice it",
          ),
      })
      .strict()
      .prefault({})
      .describe('the microvm runtime (QEMU microvm; emulated with TCG where /dev/kvm is missing)'),
    storage: z
      .object({
        image_gib: z
          .number()
          .min(0)
          .default(0)
          .meta({ restart: true })
          .describe(
            "size of the sparse btrfs image made at <data_dir>/store.img and loop-mounted (nosuid,nodev) at <data_dir>/store when the data dir is not on btrfs (sandbox writable layers, each limited to its disk_gib, template layers and volumes); 0 = half the data dir filesystem's free space when the image is made. Production: put the data dir on a btrfs device instead",
          ),
        layer_unpack_max_gib: z
          .number()
          .positive()
          .default(LAYER_UNPACK_MAX_GIB)
          .describe(
            'most GiB one import may unpack into the layer store, all its layers together (an archive upload, a registry pull, a fetch from another node; file sizes plus 4 KiB per entry): a bigger one, a decompression bomb say, is refused with 413 (code 130437) and leaves nothing. Whatever this says, an import also stops with 503 (code 130598) before the store keeps less than 256 MiB free. The default fits the largest images in common use (CUDA and ML framework images unpack to 10-20 GiB)',
          ),
      })
      .strict()
      .prefault({}),
    identity: z
      .object({
        userns: z
          .boolean()
          .default(true)
          .meta({ restart: true })
          .describe(
            "each sandbox of the ns runtime in a user namespace of its own, ids 0-65535 inside mapped to its own range of host ids (root inside is not host root, `user` is no other sandbox's or host account's uid); false: every sandbox's `user` is host uid 1000 and root is host root (kernels without idmapped mounts). Sandboxes that ask for NET_RAW (cube.net_raw, only where allow_net_raw allows it) always run the false way: raw sockets need root of the host's namespace",
          ),
        host_id_base: z
          .number()
          .int()
          .min(1)
          .default(1_000_000)
          .meta({ restart: true })
          .describe(
            "first host id of the sandboxes' ranges (65,536 ids each); the daemon refuses to start when the ranges meet an id of /etc/passwd, /etc/group, /etc/subuid or /etc/subgid",
          ),
        host_id_ranges: z
          .number()
          .int()
          .min(1)
          .max(60_000)
          .default(4096)
          .meta({ restart: true })
          .describe('ranges of 65,536 host ids, one per running sandbox: a create past them gets 503 (code 130599)'),
        allow_net_raw: z
          .boolean()
          .default(false)
          .meta({ restart: true })
          .describe(
            "allow creates with the metadata label cube.net_raw=true on the ns runtime: root inside keeps CAP_NET_RAW (raw and packet sockets), and the sandbox runs with the host's ids (root inside is host root, `user` host uid 1000, its processes visible to that host account) since raw sockets need root of the host's namespace; false: such a create is refused with 403 (code 130436)",
          ),
      })
      .strict()
      .prefault({}),
    sandbox_limits: z
      .object({
        open_files_share: z
          .number()
          .gt(0)
          .max(1)
          .default(DEFAULT_OPEN_FILES_SHARE)
          .meta({ restart: true })
          .describe(
            "share of the host's file table (fs.file-max) one sandbox of the ns runtime may hold: its processes' open-file limit (RLIMIT_NOFILE) is the share over its pids limit, at least 512; where that is fewer, its pids limit is lowered so that pids x open files stays within the share. A create may ask for fewer files with the metadata label cube.open_files=N (more is refused with 400). 0.0625: sixteen sandboxes at their limits fill the table",
          ),
        io: z
          .object({
            read_mibps: ioLimit(DEFAULT_IO_LIMITS.readMiBps, 'reads in MiB per second', 'read_mibps'),
            write_mibps: ioLimit(DEFAULT_IO_LIMITS.writeMiBps, 'writes in MiB per second', 'write_mibps'),
            read_iops: ioLimit(DEFAULT_IO_LIMITS.readIops, 'read operations per second', 'read_iops'),
            write_iops: ioLimit(DEFAULT_IO_LIMITS.writeIops, 'write operations per second', 'write_iops'),
          })
          .strict()
          .prefault({})
          .describe(
            "each sandbox's I/O on the sandbox store's device (its loop device, or the disks of a btrfs data dir), throttled in its cgroup (v1 blkio.throttle.*, cgroup2 io.max). What the kernel charges to a sandbox: reads, direct I/O and what its fsync and sync calls write; buffered writes its flusher writes back are not charged under cgroup v1",
          ),
      })
      .strict()
      .prefault({})
      .describe("each sandbox's share of host-wide tables and devices (ns runtime); the node's default and the most a create may ask for"),
    registry: z
      .object({
        insecure: z
          .array(z.string().regex(/^[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^\[[0-9a-fA-F:]+\](:[0-9]{1,5})?$/, { error: 'must be a registry host or host:port' }))
          .default([])
          .describe(
            'registries this node pulls images from (template import docker://..., E2B fromImage) over plain HTTP or without verifying their TLS certificate: host:port as the image reference names it (a bare host covers every port of it). Every other registry is reached over verified HTTPS',
          ),
      })
      .strict()
      .prefault({})
      .describe('pulling images from registries (skopeo)'),
    warm_pool: z
      .object({
        size: z
          .number()
          .int()
          .min(0)
          .max(16)
          .default(1)
          .describe(
            "started-and-ready sandboxes kept per template with a start command, once a create of it reached this node: a create of the template's default spec and runtime (no volumes, snapshot or net_raw) takes one and returns at once, a new one is made in the background, one at a time. Warm sandboxes hold only room real ones leave: they are destroyed before a create needs it and while the host's available memory is under the reserve. 0 = off",
          ),
        templates: z
          .record(z.string(), z.number().int().min(0).max(16))
          .default({})
          .describe(
            'pool size per template name (overrides size; 0 = none for it); a template named here is warmed from the start, not only after its first create (`cubectl config set warm_pool.templates \'{"code-interpreter":2}\'`)',
          ),
        idle_sec: z
          .number()
          .int()
          .min(10)
          .default(900)
          .describe("a template's pool is dropped after this long without a create of it (templates named in warm_pool.templates are kept)"),
      })
      .strict()
      .prefault({})
      .describe('warm pools: started sandboxes of start-command templates, handed to creates (docs/operations.md)'),
    quota: z
      .object({
        cpus: z.number().positive().optional().describe('declared node CPUs (in place of what the host reports)'),
        memory_mib: z.number().int().positive().optional().describe('declared node memory in MiB (in place of MemTotal)'),
      })
      .strict()
      .optional()
      .describe('declare node capacity instead of reading it from the host'),
    plugins: z
      .object({
        'io.cubelet.internal.v1.network': z
          .object({
            tap_init_num: z
              .number()
              .int()
              .min(0)
              .max(16000)
              .default(32)
              .meta({ restart: true })
              .describe('network slots (netns + veth) created at start-up and kept warm for ns sandboxes (on a node offering the ns runtime)'),
            microvm_tap_init_num: z
              .number()
              .int()
              .min(0)
              .max(16000)
              .default(8)
              .meta({ restart: true })
              .describe(
                "TAP-mode network slots (netns + veth + a TAP device and the guest's NAT) created at start-up and kept warm for microvm sandboxes (on a node offering the microvm runtime): the console's TAP pool",
              ),
            cidr: z
              .string()
              .regex(/^\d+\.\d+\.\d+\.\d+\/\d+$/, { error: 'must be an IPv4 CIDR like 10.213.0.0/16' })
              .default('10.213.0.0/16')
              .meta({ restart: true })
              .describe('private range the IPAM carves /30 slots from; must not overlap another node on the same host'),
            allow_host_access: z.boolean().default(false).describe('let sandboxes reach services on host addresses (off: nftables drops it)'),
            allow_internet_access: z
              .boolean()
              .default(true)
              .describe("internet (NAT through the host) for sandboxes whose create does not say; E2B's allow_internet_access overrides it per sandbox"),
            deny_out: z
              .array(
                z.string().regex(/^((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)(\/(3[0-2]|[12]?\d))?$/, {
                  error: 'must be an IPv4 address or CIDR like 10.0.0.0/8',
                }),
              )
              .default(['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '169.254.0.0/16'])
              .describe("destinations no sandbox reaches, whatever it asks (the host's LAN, cloud metadata); a sandbox's network.allowOut cannot reopen them"),
            deny_host_networks: z
              .boolean()
              .default(true)
              .describe(
                "also deny, like deny_out, the host's own connected IPv4 subnets and gateways (read from its routing table when the rules are installed: at start and on a policy change), whatever their range",
              ),
            conntrack_max_per_sandbox: z
              .number()
              .int()
              .min(16)
              .max(1_000_000)
              .default(4096)
              .describe(
                "connections one sandbox may have tracked at once (nftables ct count by source address): the host's conntrack table (nf_conntrack_max) is shared by every sandbox and the host; past it a sandbox's new connections are dropped",
              ),
            new_connections_per_sec: z
              .number()
              .int()
              .min(1)
              .max(1_000_000)
              .default(500)
              .describe("new connections per second one sandbox may open (burst: one second's worth); more are dropped"),
          })
          .strict()
          .prefault({}),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type MasterConfig = z.infer<typeof MasterConfigSchema>;
export type CubeletConfig = z.infer<typeof CubeletConfigSchema>;
export type SandboxSpec = z.infer<typeof SandboxSpecSchema>;
export type FilterName = (typeof FILTER_NAMES)[number];
export type ScorerName = (typeof SCORER_NAMES)[number];

/** Both files together, as the daemon holds them. */
export interface Config {
  master: MasterConfig;
  cubelet: CubeletConfig;
}
