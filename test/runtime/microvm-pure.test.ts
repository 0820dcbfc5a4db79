// The pure parts of the microvm runtime: QEMU's argv, the agent's wire format,
// the runtime set's choice and the runtimes label (no VM is booted here).
import { describe, expect, it } from 'vitest';
import { kvmBackend, memoryRefusal } from '../../src/runtime/microvm/host.js';
import { qemuArgs } from '../../src/runtime/microvm/qemu.js';
import { assertMigratable, listening, virtiofsdArgs } from '../../src/runtime/microvm/virtiofs.js';
import { FrameDecoder, T, encodeFrame, fields, parseStats, splitFields } from '../../src/runtime/microvm/protocol.js';
import { RuntimeSet } from '../../src/runtime/multi.js';
import { runtimesLabel } from '../../src/tui/format.js';
import type { RuntimeInfo } from '../../src/api/types.js';
import { templateRuntime, type RuntimeDriver } from '../../src/runtime/types.js';
import { templateFacts } from '../../src/cubelet/node-view.js';

const shape = { kernel: '/k', initrd: '/i', image: '/img', cpus: 2, memoryMiB: 256, kvm: false };

describe('qemuArgs', () => {
  it("emulates with the timer arguments the probe needed, names the process, joins the TAP-mode slot's TAP", () => {
    const a = qemuArgs({ ...shape, id: 'abc', dir: '/d', disk: '/d/disk.qcow2', net: 'tap', uid: 1_065_536 });
    const at = (flag: string) => a[a.indexOf(flag) + 1];
    expect(at('-accel')).toBe('tcg,tb-size=32');
    expect(at('-append')).toContain('tsc_early_khz=2000000 no_timer_check lpj=4000000');
    expect(at('-name')).toBe('cube-abc,process=cube-vm');
    expect(at('-smp')).toBe('2');
    expect(at('-netdev')).toBe('tap,id=n0,ifname=cubetap0,script=no,downscript=no,vhost=off');
    expect(a).not.toContain('-incoming');
    // The disks come as descriptors (a chrooted QEMU cannot reopen a path): the image, then the writable disk read-write and read-only.
    expect(a.join(' ')).toContain('-add-fd fd=4,set=1 -add-fd fd=5,set=2 -add-fd fd=6,set=2 -drive file=/dev/fdset/1,format=raw,if=none,readonly=on');
  });

  it('confines QEMU: seccomp without new processes or resource control, its own uid, an empty root; it runs in the foreground and its console goes to a socket', () => {
    const a = qemuArgs({ ...shape, id: 'abc', dir: '/d', disk: '/d/disk.qcow2', net: 'tap', uid: 1_065_536 });
    const at = (flag: string) => a[a.indexOf(flag) + 1];
    expect(at('-sandbox')).toBe('on,obsolete=deny,spawn=deny,resourcecontrol=deny');
    expect(at('-runas')).toBe('1065536:1065536');
    expect(at('-chroot')).toBe('/d/jail');
    expect(at('-serial')).toBe('chardev:con');
    expect(at('-chardev')).toBe('socket,id=con,path=/d/c.sock,server=on,wait=off');
    expect(a).not.toContain('-daemonize');
  });

  it('a KVM host drops the TCG timer workaround; a clone maps the snapshot RAM privately and waits for its state', () => {
    const a = qemuArgs({
      ...shape,
      kvm: true,
      id: 'x',
      dir: '/d',
      disk: '/d/disk.qcow2',
      net: 'hub',
      uid: 1_000_000,
      ram: { path: '/s/ram', shared: false },
      incoming: true,
    });
    const at = (flag: string) => a[a.indexOf(flag) + 1];
    expect(at('-accel')).toBe('kvm');
    expect(at('-append')).not.toContain('lpj=');
    expect(at('-M')).toBe('microvm,memory-backend=mem');
    expect(at('-object')).toBe('memory-backend-file,id=mem,size=256M,mem-path=/s/ram,share=off');
    expect(at('-incoming')).toBe('defer');
    expect(at('-netdev')).toBe('hubport,id=n0,hubid=0');
  });

  it('volumes: guest memory in a shared memfd (virtiofsd maps it), virtio 1.0 transports and a vhost-user-fs device per volume; none without', () => {
    const plain = qemuArgs({ ...shape, id: 'x', dir: '/d', disk: '/d/disk.qcow2', net: 'tap', uid: 1_000_000 });
    expect(plain).not.toContain('-object');
    expect(plain).not.toContain('-global');
    expect(plain.join(' ')).not.toContain('vhost-user');
    const a = qemuArgs({ ...shape, id: 'x', dir: '/d', disk: '/d/disk.qcow2', net: 'tap', uid: 1_000_000, volumes: 2 });
    const at = (flag: string) => a[a.indexOf(flag) + 1];
    expect(at('-M')).toBe('microvm,memory-backend=mem');
    expect(at('-object')).toBe('memory-backend-memfd,id=mem,size=256M,share=on');
    expect(at('-global')).toBe('virtio-mmio.force-legacy=false');
    expect(a.join(' ')).toContain(
      '-chardev socket,id=vfs0,path=/d/vfs0.sock -device vhost-user-fs-device,chardev=vfs0,tag=cube-vol0 -chardev socket,id=vfs1,path=/d/vfs1.sock -device vhost-user-fs-device,chardev=vfs1,tag=cube-vol1',
    );
  });
});

describe('virtiofsd', () => {
  it('serves the volume confined in its namespaces, coherent with other sandboxes (no attribute cache), without xattrs, locks, mknod or file capabilities', () => {
    expect(virtiofsdArgs('/d/vfs0.sock', '/s/volumes/v')).toEqual([
      '--socket-path=/d/vfs0.sock',
      '-o',
      'source=/s/volumes/v,sandbox=namespace,cache=auto,timeout=0,no_xattr,no_posix_lock,no_flock,modcaps=-mknod:-setfcap',
      '--rlimit-nofile=0',
    ]);
  });

  it('is ready when /proc/net/unix shows its socket listening (__SO_ACCEPTCON), not merely bound', () => {
    const table = [
      'Num       RefCount Protocol Flags    Type St Inode Path',
      '0000000000000000: 00000002 00000000 00010000 0001 01 4242 /d/vfs0.sock',
      '0000000000000000: 00000002 00000000 00000000 0001 01 4243 /d/vfs1.sock',
    ].join('\n');
    expect(listening(table, '/d/vfs0.sock')).toBe(true);
    expect(listening(table, '/d/vfs1.sock')).toBe(false);
    expect(listening(table, '/d/vfs2.sock')).toBe(false);
  });

  it('a VM with volumes cannot be migrated: a snapshot of it is 409 saying so', () => {
    expect(() => assertMigratable('sb1', [{ volumeID: 'vol-1', path: '/data' }])).toThrow(/sandbox sb1 mounts volumes: no snapshot of it can be taken/);
    expect(() => assertMigratable('sb1', undefined)).not.toThrow();
  });
});

describe('memoryRefusal', () => {
  it.each([
    [1024, 4096, undefined],
    [3936, 4096, undefined], // exactly the node's memory with QEMU's 160 MiB
    [3937, 4096, "a microVM of 3937 MiB (+160 MiB for QEMU) does not fit this node's 4096 MiB of memory: guest memory is really allocated, not a limit"],
    [1 << 20, undefined, undefined],
  ])('%i MiB on a node of %s MiB: %s', (mem, node, want) => {
    expect(memoryRefusal(mem, node)).toBe(want);
  });
});

describe('kvmBackend', () => {
  it.each([
    [['kvm', 'kvm_intel'], 'kvm_intel'],
    [['kvm', 'kvm_amd'], 'kvm_amd'],
    // A nested host's paravirtual KVM runs PVM guest kernels only: emulate.
    [['kvm', 'kvm_pvm'], undefined],
    [[], undefined],
  ])('modules %j: %s', (mods, want) => {
    expect(kvmBackend((m) => mods.includes(m))).toBe(want);
  });
});

describe('agent wire format', () => {
  it('decodes frames split at every byte', () => {
    const all = Buffer.concat([encodeFrame(T.STDOUT, 7, 'hello'), encodeFrame(T.EXIT, 7, fields(3, 0))]);
    for (let cut = 0; cut <= all.length; cut++) {
      const dec = new FrameDecoder();
      const got = [...dec.push(all.subarray(0, cut)), ...dec.push(all.subarray(cut))];
      expect(got.map((f) => [f.type, f.chan, f.payload.toString()])).toEqual([
        [T.STDOUT, 7, 'hello'],
        [T.EXIT, 7, '3\0' + '0\0'],
      ]);
    }
  });

  it('refuses NUL inside a field and parses stat records', () => {
    expect(() => fields('a\0b')).toThrow(/NUL/);
    expect(splitFields(fields('x', 1))).toEqual(['x', '1']);
    const rec = fields('l', 4, 511, 1000, 1000, 1_700_000_000_000, '/home/user/ln', 'target') as Buffer;
    const dir = fields('d', 4096, 493, 0, 0, 0, '/', '');
    expect(parseStats(Buffer.concat([rec, dir]))).toEqual([
      {
        name: 'ln',
        path: '/home/user/ln',
        type: 'symlink',
        size: 4,
        mode: 511,
        uid: 1000,
        gid: 1000,
        mtime: new Date(1_700_000_000_000),
        symlinkTarget: 'target',
      },
      { name: '/', path: '/', type: 'dir', size: 4096, mode: 493, uid: 0, gid: 0, mtime: new Date(0) },
    ]);
  });
});

describe('runtimes of a node', () => {
  const fake = (name: 'ns' | 'microvm', info?: RuntimeInfo) => ({ name, ...(info ? { runtimes: () => [info] } : {}) }) as unknown as RuntimeDriver;

  it('the first is the default, others by name, an unknown one is a 400 naming what is offered', () => {
    const set = new RuntimeSet([fake('ns'), fake('microvm', { name: 'microvm', emulated: true, releaseBacked: true })]);
    expect(set.pick(undefined).name).toBe('ns');
    expect(set.pick('microvm').name).toBe('microvm');
    expect(() => set.pick('sim')).toThrow(/offers ns, microvm/);
    expect(set.runtimes()).toEqual([{ name: 'ns' }, { name: 'microvm', emulated: true, releaseBacked: true }]);
  });

  it.each([
    [[{ name: 'ns' }, { name: 'microvm', emulated: true, releaseBacked: true }], 'ns, microvm (emulated: tcg, pause frees memory)'],
    [[{ name: 'microvm', releaseBacked: true }], 'microvm (pause frees memory)'],
    [[{ name: 'ns' }, { name: 'microvm', emulated: true }], 'ns, microvm (emulated: tcg)'],
    [undefined, 'ns'],
  ])('labels %j in cubectl nodes and the console as %s', (runtimes, label) => {
    expect(runtimesLabel({ runtime: 'ns', ...(runtimes ? { runtimes } : {}) })).toBe(label);
  });
});

describe("a template's default runtime", () => {
  it('is one of the runtimes a template may name', () => {
    expect(templateRuntime('microvm')).toBe('microvm');
    expect(() => templateRuntime('sim')).toThrow(/one of ns, microvm \(got sim\)/);
  });

  it('reaches the node view for the templates that name one', () => {
    const t = (name: string, runtime?: 'ns' | 'microvm') => ({
      name,
      layers: [],
      bindHostUsr: false,
      config: { env: {}, workdir: '', user: 'user', ...(runtime ? { runtime } : {}) },
    });
    expect(templateFacts([t('host'), t('vm', 'microvm'), t('plain:v2', 'ns')])).toEqual({
      templates: ['host', 'vm', 'plain:v2'],
      templateRuntimes: { vm: 'microvm', 'plain:v2': 'ns' },
    });
  });
});
