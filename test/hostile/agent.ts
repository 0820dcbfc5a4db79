// A network agent of its own node tag and test CIDR for one describe block (the default policy,
// with `policy` over it), torn down (and its kernel objects purged) after it.
import { afterAll, beforeAll } from 'vitest';
import { NsNetworkAgent } from '../../src/network/agent.js';
import type { PolicySettings } from '../../src/network/firewall.js';
import { nodeTag } from '../../src/ids.js';
import { defaultNetworkPolicy, purgeNetwork, testCidr, uniqueNodeID } from '../helpers/kernel.js';

export function useNetAgent(name: string, policy: Partial<PolicySettings> = {}): NsNetworkAgent {
  const tag = nodeTag(uniqueNodeID(name));
  const agent = new NsNetworkAgent({ nodeTag: tag, cidr: testCidr(), initNum: 1, policy: { ...defaultNetworkPolicy(), ...policy } });
  beforeAll(async () => {
    await agent.start();
  });
  afterAll(async () => {
    await agent.stop({ destroy: true }).catch(() => undefined);
    await purgeNetwork(tag);
  });
  return agent;
}
