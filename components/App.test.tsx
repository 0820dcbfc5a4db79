import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { recordingActions, storeFrom } from '../test/tui/console.js';
import { inputReady, waitForFrame } from '../test/tui/replay.js';
import { setUi } from '../src/tui/store.js';
import { App } from './App.js';

const setup = async (opts: { readonly?: boolean } = {}) => {
  const store = storeFrom(undefined, opts);
  const actions = recordingActions();
  let quit = 0;
  const r = render(<App store={store} actions={actions} onQuit={() => quit++} />);
  await inputReady();
  return { store, actions, r, quits: () => quit };
};

describe('App', () => {
  it('keeps the root at most rows-1 high and every line within the width', async () => {
    const { r } = await setup();
    const lines = r.lastFrame()!.split('\n');
    expect(lines.length).toBeLessThanOrEqual(23);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(100);
    expect(lines[0]).toBe('LIVE  http://127.0.0.1:3000  config v2  release ratio 0.75');
    expect(lines[1]).toMatch(/^nodes 2 \(1 schedulable\) +sandboxes 2 running 1 paused +creates 15\/min 0\.23\/s p99 101ms$/);
  });

  it('switches views with number keys, tab and :command', async () => {
    const { r } = await setup();
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => /SANDBOX +NODE +STATE/.test(f));
    r.stdin.write('\t');
    await waitForFrame(r.lastFrame, (f) => /FREE\/TOTAL/.test(f));
    r.stdin.write(':');
    await waitForFrame(r.lastFrame, (f) => f.includes(':_'));
    r.stdin.write('ev');
    await waitForFrame(r.lastFrame, (f) => f.includes(':ev_'));
    r.stdin.write('\r');
    const f = await waitForFrame(r.lastFrame, (x) => /KIND/.test(x));
    expect(f).toMatch(/schedule\.failed .*130597 +no node available/);
  });

  it('filters the sandboxes with / and clears with esc', async () => {
    const { r } = await setup();
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => f.includes('sb-0001'));
    r.stdin.write('/');
    r.stdin.write('0004');
    let f = await waitForFrame(r.lastFrame, (x) => !x.includes('sb-0001') && x.includes('sb-0004'));
    expect(f).toContain('/0004_');
    r.stdin.write('\r');
    f = await waitForFrame(r.lastFrame, (x) => x.includes('filter: /0004'));
    r.stdin.write('\x1b');
    await waitForFrame(r.lastFrame, (x) => x.includes('sb-0001') && !x.includes('filter:'));
  });

  it('drains the selected node only after confirmation', async () => {
    const { r, actions } = await setup();
    r.stdin.write('j');
    r.stdin.write('d');
    const f = await waitForFrame(r.lastFrame, (x) => x.includes('Drain node node-b?'));
    expect(f).toContain('y/enter: yes');
    r.stdin.write('n');
    await waitForFrame(r.lastFrame, (x) => !x.includes('Drain node'));
    expect(actions.calls).toEqual([]);
    r.stdin.write('d');
    await waitForFrame(r.lastFrame, (x) => x.includes('Drain node node-b?'));
    r.stdin.write('y');
    await waitForFrame(r.lastFrame, (x) => !x.includes('Drain node'));
    expect(actions.calls).toEqual(['drain "node-b"']);
  });

  it('edits the release ratio inline: rejects out of range, previews the density, applies', async () => {
    const { r, actions } = await setup();
    r.stdin.write('r');
    await waitForFrame(r.lastFrame, (f) => f.includes('> 0.75_'));
    r.stdin.write('\x15');
    r.stdin.write('1.5');
    let f = await waitForFrame(r.lastFrame, (x) => x.includes('> 1.5_'));
    expect(f).toContain('must be between 0 and 1');
    r.stdin.write('\r');
    expect(actions.calls).toEqual([]);
    for (const k of ['\x7f', '\x7f', '\x7f', '0.5']) r.stdin.write(k);
    f = await waitForFrame(r.lastFrame, (x) => x.includes('> 0.5_'));
    expect(f).toMatch(/node-a: all paused 469 -> 234, frees 3\.1Gi -> 2\.1Gi, headroom/);
    r.stdin.write('\r');
    await waitForFrame(r.lastFrame, (x) => !x.includes('> 0.5_'));
    expect(actions.calls).toEqual(['setReleaseRatio 0.5 "node-a"']);
  });

  it('submits a pasted value whose Enter arrives in the same chunk, and ignores what follows it', async () => {
    const { r, actions, quits } = await setup();
    r.stdin.write('r');
    await waitForFrame(r.lastFrame, (f) => f.includes('> 0.75_'));
    r.stdin.write('\x15');
    await waitForFrame(r.lastFrame, (f) => f.includes('> _'));
    r.stdin.write('0.5\rq');
    await waitForFrame(r.lastFrame, (x) => !x.includes('> 0.5'));
    expect(actions.calls).toEqual(['setReleaseRatio 0.5 "node-a"']);
    expect(quits()).toBe(0);
    // The same in the filter: the text applies and Enter closes it.
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => f.includes('sb-0001'));
    r.stdin.write('/');
    r.stdin.write('0004\r');
    const f = await waitForFrame(r.lastFrame, (x) => x.includes('sb-0004') && !x.includes('sb-0001'));
    expect(f).not.toMatch(/^\/0004/m);
  });

  it('destroys marked sandboxes after confirmation and pauses the selected one', async () => {
    const { r, actions } = await setup();
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => f.includes('sb-0001'));
    r.stdin.write(' ');
    r.stdin.write(' ');
    r.stdin.write('\x04');
    await waitForFrame(r.lastFrame, (x) => x.includes('Destroy 2 sandboxes?'));
    expect(r.lastFrame()).toContain('sb-0001 sb-0003');
    r.stdin.write('\r');
    await waitForFrame(r.lastFrame, (x) => !x.includes('Destroy'));
    expect(actions.calls).toEqual(['destroy ["sb-0001","sb-0003"]']);
    r.stdin.write('p');
    await waitForFrame(r.lastFrame, () => actions.calls.length === 2);
    expect(actions.calls[1]).toMatch(/^togglePause sb-000[14]$/);
  });

  it('launches with the defaults from the config on the selected node', async () => {
    const { r, actions } = await setup();
    r.stdin.write('n');
    await waitForFrame(r.lastFrame, (f) => f.includes('launch a sandbox on node-a'));
    expect(r.lastFrame()).toContain('> template=host cpus=1 mem=4096 timeout=300 node=node-a_');
    r.stdin.write(' bogus=1');
    await waitForFrame(r.lastFrame, (f) => f.includes('unknown field "bogus"'));
    for (let i = 0; i < 8; i++) r.stdin.write('\x7f');
    await waitForFrame(r.lastFrame, (f) => f.includes('enter to launch'));
    r.stdin.write('\r');
    await waitForFrame(r.lastFrame, () => actions.calls.length === 1);
    expect(actions.calls[0]).toBe('launch {"templateID":"host","cpus":1,"memoryMiB":4096,"timeoutSec":300,"nodeID":"node-a"}');
  });

  it('--readonly: dangerous keys do nothing and help does not list them', async () => {
    const { r, actions } = await setup({ readonly: true });
    expect(r.lastFrame()).toContain('[RO]');
    r.stdin.write('d');
    r.stdin.write('R');
    r.stdin.write('?');
    const f = await waitForFrame(r.lastFrame, (x) => x.includes('Keys (read-only'));
    expect(f).toContain('this help');
    expect(f).not.toMatch(/drain the node|paused_resource_release_ratio|destroy the selected|hot-reload/);
    expect(actions.calls).toEqual([]);
  });

  it('handles the keys of one read in order: jjj moves three rows', async () => {
    const { r, store } = await setup();
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => f.includes('sb-0001'));
    r.stdin.write('jjj');
    await waitForFrame(r.lastFrame, () => store.getState().ui.selected.sandboxes === 'sb-0004');
  });

  it('ctrl-u, a value and Enter in one read apply the new value, not the old one', async () => {
    const { r, actions } = await setup();
    r.stdin.write('r');
    await waitForFrame(r.lastFrame, (f) => f.includes('> 0.75_'));
    r.stdin.write('\x150.5\r');
    await waitForFrame(r.lastFrame, () => actions.calls.length === 1);
    expect(actions.calls).toEqual(['setReleaseRatio 0.5 "node-a"']);
  });

  it(':q! quits, typed at once', async () => {
    const { r, quits } = await setup();
    r.stdin.write(':q!\r');
    await waitForFrame(r.lastFrame, () => quits() === 1);
  });

  it('the drain dialog says sandboxes are not migrated and offers evict with a deadline', async () => {
    const { r, actions } = await setup();
    r.stdin.write('d');
    const f = await waitForFrame(r.lastFrame, (x) => x.includes('Drain node node-a?'));
    expect(f).toContain('Its 3 sandbox(es) are NOT migrated');
    expect(f).toContain('e: evict after a deadline');
    r.stdin.write('e');
    await waitForFrame(r.lastFrame, (x) => x.includes('> 300_'));
    expect(r.lastFrame()).toContain('destroy what is left at 300s (not migrated)');
    r.stdin.write('\x1560\r');
    await waitForFrame(r.lastFrame, () => actions.calls.length === 1);
    expect(actions.calls).toEqual(['drain "node-a" {"evict":true,"deadlineSec":60}']);
  });

  it('enter describes the selected node with every scheduler rule; j scrolls, esc closes', async () => {
    const { r } = await setup();
    r.stdin.write('j');
    r.stdin.write('\r');
    const f = await waitForFrame(r.lastFrame, (x) => x.startsWith('LIVE') && x.includes('node node-b'));
    expect(f).toMatch(/node node-b  1-\d+ of \d+, j\/k scroll/);
    expect(f).toContain('Node node-b at 127.0.0.1:3000');
    r.stdin.write('G');
    const end = await waitForFrame(r.lastFrame, (x) => x.includes('Recent events'));
    expect(end).toContain('REFUSE prefilter: cordoned');
    // G went to the end: the position names the last line, and it shows.
    expect(end).toMatch(/node node-b  \d+-(\d+) of \1, j\/k scroll/);
    expect(end).toMatch(/Recent events\n {2}none in the console buffer\n/);
    r.stdin.write('\x1b');
    await waitForFrame(r.lastFrame, (x) => /^NODE +STATE/m.test(x));
  });

  it('? help scrolls at 80x24 and closes', async () => {
    const { r } = await setup();
    r.stdin.write('?');
    await waitForFrame(r.lastFrame, (x) => /Keys  1-\d+ of \d+, j\/k scroll/.test(x));
    r.stdin.write('jj');
    await waitForFrame(r.lastFrame, (x) => /Keys  3-\d+ of \d+/.test(x));
    r.stdin.write('?');
    await waitForFrame(r.lastFrame, (x) => /^NODE +STATE/m.test(x));
  });

  it('s sorts every table by the next column and S reverses it; the header marks the column and navigation follows the order', async () => {
    const { r, store } = await setup();
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => f.includes('sb-0001'));
    const order = (f: string) => [...f.matchAll(/^(sb-\d{4}) {2,}/gm)].map((m) => m[1]);
    const natural = order(r.lastFrame()!);
    r.stdin.write('s');
    let f = await waitForFrame(r.lastFrame, (x) => /^SANDBOX\^/m.test(x));
    expect(f).toContain('sandboxes sorted by SANDBOX ascending');
    r.stdin.write('S');
    f = await waitForFrame(r.lastFrame, (x) => /^SANDBOXv/m.test(x));
    expect(order(f)).toEqual([...natural].reverse());
    // g goes to the first row of the order shown.
    r.stdin.write('g');
    await waitForFrame(r.lastFrame, () => store.getState().ui.selected.sandboxes === natural.at(-1));
    // Every view sorts: the last column, then back to the view's own order.
    r.stdin.write('1');
    await waitForFrame(r.lastFrame, (x) => /^NODE +STATE/m.test(x));
    r.stdin.write('sssssss');
    f = await waitForFrame(r.lastFrame, (x) => / POOL\^/m.test(x));
    r.stdin.write('s');
    f = await waitForFrame(r.lastFrame, (x) => x.includes('nodes in their own order'));
    expect(f).not.toMatch(/\^/);
    for (const v of ['3', '4', '5', '6']) {
      r.stdin.write(v);
      r.stdin.write('s');
      await waitForFrame(r.lastFrame, (x) => /sorted by \S+ ascending/.test(x) && /^\S+\^/m.test(x.split('\n').slice(2).join('\n')));
    }
  });

  it('marks show on the rows with a count in the header; space moves down', async () => {
    const { r, store } = await setup();
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => f.includes('sb-0001'));
    r.stdin.write(' ');
    const f = await waitForFrame(r.lastFrame, (x) => x.includes('1 marked'));
    expect(f).toMatch(/^sb-0001 +\* /m);
    expect(store.getState().ui.selected.sandboxes).not.toBe('sb-0001');
    r.stdin.write(' ');
    await waitForFrame(r.lastFrame, (x) => x.includes('2 marked'));
  });

  it('x runs a command in the selected sandbox and l fetches its logs, from the table and from its describe pane', async () => {
    const { r, actions, store } = await setup();
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => f.includes('sb-0001'));
    r.stdin.write('x');
    await waitForFrame(r.lastFrame, (f) => f.includes('run in sb-0001'));
    r.stdin.write('echo hi\r');
    await waitForFrame(r.lastFrame, (x) => x.includes('sandbox sb-0001') && x.includes('Recent output'));
    expect(actions.calls).toEqual(['exec "sb-0001" "echo hi"']);
    store.setState((s) => ({
      ui: { ...s.ui, output: { 'sb-0001': ['$ echo hi', 'hi', '[exit 0]'] }, logs: { 'sb-0001': ['2026-01-01 10:00:00 sandbox.created: created'] } },
    }));
    const f = await waitForFrame(r.lastFrame, (x) => x.includes('[exit 0]'));
    expect(f).toContain('$ echo hi');
    r.stdin.write('l');
    await waitForFrame(r.lastFrame, () => actions.calls.length === 2);
    expect(actions.calls[1]).toBe('logs "sb-0001"');
    r.stdin.write('g');
    await waitForFrame(r.lastFrame, (x) => x.includes('Sandbox sb-0001'));
  });

  it('a opens a shell in a running sandbox, says why not for a paused one, and reads no key while the shell has the terminal', async () => {
    const store = storeFrom();
    const shells: string[] = [];
    const r = render(<App store={store} actions={recordingActions()} shell={(id) => shells.push(id)} />);
    await inputReady();
    r.stdin.write('2');
    await waitForFrame(r.lastFrame, (f) => f.includes('sb-0001'));
    r.stdin.write('a');
    await waitForFrame(r.lastFrame, () => shells.length === 1);
    expect(shells).toEqual(['sb-0001']);
    // sb-0003 is paused: a status line, no shell.
    r.stdin.write('/');
    r.stdin.write('0003\r');
    await waitForFrame(r.lastFrame, (x) => x.includes('filter: /0003'));
    r.stdin.write('a');
    await waitForFrame(r.lastFrame, (x) => x.includes('no shell: sandbox sb-0003 is paused (p resumes it): a shell needs it running'));
    expect(shells).toEqual(['sb-0001']);
    // Suspended: keys are the shell's, not the console's.
    setUi(store, { suspended: true });
    await new Promise((res) => setTimeout(res, 50));
    r.stdin.write('?');
    await new Promise((res) => setTimeout(res, 100));
    expect(r.lastFrame()).not.toContain('General');
    setUi(store, { suspended: false });
    await inputReady();
    r.stdin.write('?');
    await waitForFrame(r.lastFrame, (x) => x.includes('General'));
  });

  it('e edits a live key from the config view; a restart key says to edit the file', async () => {
    const { r, actions } = await setup();
    r.stdin.write('5');
    await waitForFrame(r.lastFrame, (f) => /^PATH +APPLIES +FROM +VALUE/m.test(f));
    r.stdin.write('/');
    r.stdin.write('mem_oversell');
    r.stdin.write('\r');
    await waitForFrame(r.lastFrame, (f) => f.includes('filter: /mem_oversell'));
    r.stdin.write('e');
    await waitForFrame(r.lastFrame, (f) => f.includes('host.quota.mem_oversell_ratio (now 2), applied live') && f.includes('> 2_'));
    r.stdin.write('\x15');
    r.stdin.write('3\r');
    await waitForFrame(r.lastFrame, () => actions.calls.length === 1);
    expect(actions.calls).toEqual(['setConfig "host.quota.mem_oversell_ratio" 3']);
  });

  it('o in the events view fetches the page of older events', async () => {
    const { r, actions } = await setup();
    r.stdin.write('4');
    await waitForFrame(r.lastFrame, (f) => /^TIME +KIND/m.test(f) && f.includes('o older'));
    r.stdin.write('o');
    await waitForFrame(r.lastFrame, () => actions.calls.includes('olderEvents'));
  });

  it('q quits', async () => {
    const { r, quits } = await setup();
    r.stdin.write('q');
    await waitForFrame(r.lastFrame, () => quits() === 1);
  });
});
