// Tests wait for a state or an event, never for a fixed delay: poll a probe until it holds.
import type { ChildProcess } from 'node:child_process';

export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | null | false>,
  timeoutMs = 60_000,
  opts: { intervalMs?: number; ignoreErrors?: boolean } = {},
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    // A probe of a service still starting may fail; some callers wait through that.
    const v = await (opts.ignoreErrors ? probe().catch(() => undefined) : probe());
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 50));
  }
}

/** Resolves with the exit code once the child has exited (at once if it already has). */
export function exited(child: ChildProcess): Promise<number | null> {
  return child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve(child.exitCode)
    : new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}
