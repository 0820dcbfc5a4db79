// The real console in a tmux session, for the end-to-end tests: start it, read the screen,
// send keys, poll the screen for a condition (bounded), wait for it to end, kill it.
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';

export const BIN = resolve(import.meta.dirname, '../../bin/cubectl-tui');

export function tmuxConsole(session: string) {
  const tmux = (...args: string[]) => execFileSync('tmux', args, { encoding: 'utf8' });
  const screen = () => tmux('capture-pane', '-p', '-t', session);
  const alive = () => {
    try {
      tmux('has-session', '-t', session);
      return true;
    } catch {
      return false;
    }
  };
  const until = async (what: string, pred: (s: string) => boolean, timeoutMs = 20_000): Promise<string> => {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const s = screen();
      if (pred(s)) return s;
      if (Date.now() > end) throw new Error(`console never showed ${what}; screen:\n${s}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const keys = (...k: string[]) => tmux('send-keys', '-t', session, ...k);
  return {
    /** Runs `command` in a new detached session of `cols` x `rows` with `env`. */
    start(cols: number, rows: number, env: Record<string, string>, command: string): void {
      tmux(
        'new-session',
        '-d',
        '-s',
        session,
        '-x',
        String(cols),
        '-y',
        String(rows),
        ...Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]),
        command,
      );
    },
    screen,
    keys,
    until,
    /**
     * Sets the current view's filter to `text` and waits until the prompt has closed with it in
     * force (`filter: /text` in the command bar). A live filter shows its rows while the prompt is
     * still open; keys sent then can arrive in one read with its Enter, and the console drops
     * what follows an Enter that closes a prompt (a pasted line never runs as view keys).
     */
    async filter(text: string, pred: (s: string) => boolean = () => true): Promise<string> {
      keys('/', 'C-u');
      keys('-l', text);
      keys('Enter');
      return until(`the filter /${text} in force`, (x) => x.includes(`filter: /${text}`) && pred(x));
    },
    /** Waits until the console (the session's only pane) has ended. */
    async ended(why: string, timeoutMs = 10_000): Promise<void> {
      const end = Date.now() + timeoutMs;
      while (alive()) {
        if (Date.now() > end) throw new Error(`${why} did not end the console; screen:\n${screen()}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    kill(): void {
      if (alive()) tmux('kill-session', '-t', session);
    },
  };
}
