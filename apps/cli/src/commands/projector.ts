// `genfill projector` (the live writer, a service: apps/projector), `genfill seal|unseal|catchup
// <release>` (requests the projector service executes) and `genfill quarantine <dataset>` (an
// operator verb).
import { InvalidArgumentError, type Command } from 'commander';
import { InvalidInputError } from '@genfill/contracts';
import { projector } from '@genfill/projector-service';
import {
  catchupRound,
  sealRelease,
  unsealRelease,
  type CatchupRound,
  type SealResult,
  type UnsealResult,
} from '@genfill/projector';
import { verbError } from '@genfill/registry';
import type { Context } from '../context.ts';
import { json } from '../io.ts';
import { viaService } from '../requests.ts';
import { registerService } from './service-verb.ts';

function positiveInt(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !(n > 0)) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

function describeSeal(r: SealResult): string {
  return [
    `sealed ${r.dataset} for ${r.release}: epoch ${r.epoch} on generation ${r.generation}, barrier ${r.barrier}`,
    `  release ${r.sealedFrom} → INGRESS_SEALED; lock wait ${r.lockWaitMs} ms (attempt ${r.attempts}), waited ${r.waitedForProjectorMs} ms for the projector`,
    `  readers of ${r.generation} see no new writes until cutover or \`genfill unseal ${r.release}\``,
  ].join('\n');
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  // `genfill projector`: the service of apps/projector, started as every service is.
  registerService(program, run, projector);

  program
    .command('seal <release>')
    .description(
      'seal ingress of the release\'s dataset (invariant 7): the projector stops at barrier B, which contains every build ' +
        'watermark; a request the projector service runs. Exit 3 naming the lock holder or the projector lag when it cannot',
    )
    .option('--wait <seconds>', 'how long to wait for the projector to pass every watermark', positiveInt, 30)
    .option('--json', 'print the seal record as JSON')
    .action((release: string, opts: { wait: number; json?: boolean }) =>
      run(async (ctx) => {
        const r = await viaService<SealResult>(ctx, { kind: 'seal', release, args: { waitMs: opts.wait * 1000 } }, (db) =>
          sealRelease(db, release, { waitForProjectorMs: opts.wait * 1000 }),
        );
        if (opts.json) return json(ctx.io, r);
        ctx.io.out(describeSeal(r));
      }),
    );

  program
    .command('unseal <release>')
    .description('reopen ingress under a new epoch; the release returns to the state it was sealed from')
    .requiredOption('--reason <text>', 'why (recorded)')
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { reason: string; json?: boolean }) =>
      run(async (ctx) => {
        const r = await viaService<UnsealResult>(ctx, { kind: 'unseal', release, args: { reason: opts.reason } }, (db) => unsealRelease(db, release, opts.reason));
        if (opts.json) return json(ctx.io, r);
        ctx.io.out(`unsealed ${r.dataset}: ingress open under epoch ${r.epoch}; ${release} is ${r.state} again`);
      }),
    );

  program
    .command('catchup <release>')
    .description(
      'one catch-up round of the release\'s candidate: the latest event per key from its catch-up frontier to the projector\'s ' +
        'frontier (after the seal: to the barrier, INGRESS_SEALED → CAUGHT_UP), version-aware; a request the projector service runs',
    )
    .option('--json', 'print the round as JSON')
    .action((release: string, opts: { json?: boolean }) =>
      run(async (ctx) => {
        const r = await viaService<CatchupRound>(ctx, { kind: 'catchup', release }, (db) => catchupRound(db, release));
        if (opts.json) return json(ctx.io, r);
        ctx.io.out(
          `catch-up round #${r.id} of ${release} into ${r.generation}: ${r.events} events (${r.upserted} written, ${r.tombstones} tombstones, ` +
            `${r.noops} no-ops${r.quarantined ? `, ${r.quarantined} quarantined` : ''}) from ${r.from} to ${r.to}${r.toBarrier ? ' (the barrier)' : ''}; root ${r.root}` +
            `${r.caughtUp ? `; ${release} INGRESS_SEALED → CAUGHT_UP` : ''}`,
        );
      }),
    );

  program
    .command('quarantine <dataset>')
    .description(
      'let the projector past a poison event: the key\'s events up to its latest logged revision are skipped, recorded ' +
        '(and read by the reconciler); the stop on that key is cleared',
    )
    .requiredOption('--key <json>', 'the key as JSON, e.g. \'{"order_id": 7}\'')
    .requiredOption('--reason <text>', 'why (recorded)')
    .option('--json', 'print the result as JSON')
    .action((dataset: string, opts: { key: string; reason: string; json?: boolean }) =>
      run(async (ctx) => {
        let key: unknown;
        try {
          key = JSON.parse(opts.key);
        } catch {
          throw new InvalidInputError([{ path: '--key', message: `not JSON: ${opts.key}` }]);
        }
        const db = await ctx.db();
        let row: { id: string; up_to_revision: string };
        try {
          row = (await db.query<{ id: string; up_to_revision: string }>('SELECT id::text, up_to_revision::text FROM genfill.quarantine_key($1, $2, $3)', [dataset, JSON.stringify(key), opts.reason])).rows[0]!;
        } catch (err) {
          throw verbError(err);
        }
        const r = { dataset, key, quarantine: row.id, upToRevision: row.up_to_revision };
        if (opts.json) return json(ctx.io, r);
        ctx.io.out(`quarantined ${JSON.stringify(key)} of ${dataset} up to revision ${row.up_to_revision} (#${row.id}); the projector resumes`);
      }),
    );
}
