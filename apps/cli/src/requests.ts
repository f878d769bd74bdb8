// Multi-step verbs run where the work belongs. A login in genfill_service (the fleet, a
// superuser, the demo, tests) runs them in this process; a person's login asks the owning
// service through genfill.request and waits here for the outcome, which it then prints and
// exits with exactly as if it had run here.
import { InvalidInputError, RequestFailedError } from '@genfill/contracts';
import { getRequest, isServiceLogin, submitRequest, type Db, type RequestKind } from '@genfill/registry';
import type { Context } from './context.ts';

const POLL_MS = 250;
const NOTE_EVERY_MS = 15_000;
/** How long a person waits for a service before the CLI gives up (the request stays queued). */
const WAIT_MS = 30 * 60_000;

const SERVICE: Record<RequestKind, string> = { plan: 'planner', repair: 'planner', reconcile: 'reconciler', seal: 'projector', unseal: 'projector', catchup: 'projector', cutover: 'projector', rollback: 'projector' };

export async function viaService<T>(
  ctx: Context,
  q: { kind: RequestKind; release: string; args?: Record<string, unknown> },
  inProcess: (db: Db) => Promise<T>,
): Promise<T> {
  const db = await ctx.db();
  if (await isServiceLogin(db)) return inProcess(db);
  const service = SERVICE[q.kind];
  const id = await submitRequest(db, q);
  ctx.io.err(`requested ${q.kind} of ${q.release} (request #${id}); waiting for the ${service} service (\`genfill ${service}\`) to run it`);
  const started = Date.now();
  let noted = started;
  for (;;) {
    const req = await getRequest(db, id);
    if (!req) throw new Error(`request #${id} disappeared`);
    if (req.state === 'DONE') return req.result as T;
    if (req.state === 'FAILED') {
      const e = req.error!;
      if (e.problems) throw new InvalidInputError(e.problems);
      throw new RequestFailedError(e.message, e.exitCode, id);
    }
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
