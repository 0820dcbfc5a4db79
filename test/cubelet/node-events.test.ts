// A start's notices (deaths found by the restart) wait for the first listener that forwards them;
// a local hook subscribed with backlog: false neither takes them nor counts as having heard them.
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { NodeEvents } from '../../src/cubelet/node-events.js';
import type { NodeEvent } from '../../src/cubelet/types.js';

const death: NodeEvent = { type: 'event', event: { kind: 'sandbox.died', at: 0, message: 'restarted and could not re-adopt it', sandboxID: 'a' } };

describe('NodeEvents', () => {
  it('keeps the notices from before anyone listened for the first forwarder, past a local hook', () => {
    const events = new NodeEvents(pino({ level: 'silent' }));
    events.emit(death);
    const hook: NodeEvent[] = [];
    events.subscribe((e) => hook.push(e), { backlog: false });
    events.emit({ ...death, event: { ...death.event, sandboxID: 'b' } }); // still nobody forwarding: kept too
    const forwarded: NodeEvent[] = [];
    events.subscribe((e) => forwarded.push(e));
    expect(forwarded.map((e) => e.type === 'event' && e.event.sandboxID)).toEqual(['a', 'b']);
    expect(hook.map((e) => e.type === 'event' && e.event.sandboxID)).toEqual(['b']);
    const late: NodeEvent[] = [];
    events.subscribe((e) => late.push(e));
    expect(late).toEqual([]); // taken by the first
  });
});
