// Multi-step verbs run where the work belongs. A login in genfill_service (the fleet, a
// superuser, the demo, tests) runs them in this process; a person's login asks the owning
// service through genfill.request and waits here for the outcome, which it then prints and
// exits with exactly as if it had run here.
import { parseRequestArgs, RequestFailedError, type RequestArgs, type RequestKind, serviceOf } from '@genfill/contracts';
import { getRequest, isServiceLogin, requestError, submitRequest, type Db } from '@genfill/registry';
import type { Context } from './context.ts';

const POLL_MS = 250;
const NOTE_EVERY_MS = 15_000;
/** How long a person waits for a service before the CLI gives up (the request stays queued). */
const WAIT_MS = 30 * 60_000;

/**
 * Run a `kind` request: its arguments are parsed first (bad ones are exit 2, nothing written);
 * then in this process for a service login, else by the owning service. A failure there is
 * raised here as the class it had there, so it exits with the same code.
 */
export async function viaService<K extends RequestKind, T>(
  ctx: Context,
  q: { kind: K; release: string; args: RequestArgs<K> },
  inProcess: (db: Db, args: RequestArgs<K>) => Promise<T>,
): Promise<T> {
  const args = parseRequestArgs(q.kind, q.args);
  const db = await ctx.db();
  if (await isServiceLogin(db)) return inProcess(db, args);
  const service = serviceOf(q.kind);
  const id = await submitRequest(db, { kind: q.kind, release: q.release, args });
  ctx.io.err(`requested ${q.kind} of ${q.release} (request #${id}); waiting for the ${service} service (\`genfill ${service}\`) to run it`);
  const started = Date.now();
  let noted = started;
  for (;;) {
    const req = await getRequest(db, id);
    if (!req) throw new Error(`request #${id} disappeared`);
    if (req.state === 'DONE') return req.result as T;
    if (req.state === 'FAILED') throw requestError(req);
    const now = Date.now();
    if (now - started > WAIT_MS) {
      throw new RequestFailedError(
        `no ${service} service finished request #${id} within ${WAIT_MS / 60_000} minutes; it stays queued and runs when \`genfill ${service}\` does (watch \`genfill status ${q.release}\`)`,
        3,
        id,
      );
    }
    if (now - noted >= NOTE_EVERY_MS) {
      noted = now;
      ctx.io.err(
        req.state === 'PENDING'
          ? `  still waiting for a ${service} service to take request #${id} (${Math.round((now - started) / 1000)}s): is \`genfill ${service}\` running?`
          : `  request #${id} is running on ${req.claimed_by} (${Math.round((now - started) / 1000)}s)`,
      );
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
