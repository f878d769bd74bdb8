// `genfill projector` (the live writer, a service: apps/projector), `genfill seal|unseal|catchup
// <release>` (requests the projector service executes) and `genfill quarantine <dataset>` (an
// operator verb).
import type { Command } from 'commander';
import { errorFromPg, InvalidInputError, RefusedError } from '@genfill/contracts';
import { projector } from '@genfill/projector-service';
import type { Context } from '../context.ts';
import { json } from '../io.ts';
import { durationOption } from '../options.ts';
import { viaService } from '../requests.ts';
import { registerService } from './service-verb.ts';
import { catchupRound, type CatchupRound, cutoverRelease, type CutoverResult, rollbackRelease, type RollbackResult, sealRelease, type SealResult, unsealRelease, type UnsealResult } from '@genfill/switch';

function describeSeal(r: SealResult): string {
  return [
    `sealed ${r.dataset} for ${r.release}: epoch ${r.epoch} on generation ${r.generation}, barrier ${r.barrier}`,
    `  release ${r.sealedFrom} → INGRESS_SEALED; lock wait ${r.lockWaitMs} ms (attempt ${r.attempts}), waited ${r.waitedForProjectorMs} ms for the projector`,
    `  readers of ${r.generation} see no new writes until cutover or \`genfill unseal ${r.release}\``,
  ].join('\n');
}

export function describeCutover(r: CutoverResult): string {
  if (r.dryRun) {
    return [
      `dry run of the cutover of ${r.release} (${r.dataset}): ${r.ok ? 'every precondition holds; nothing was sealed' : 'refused; nothing was sealed'}`,
      ...r.checks.map((c) => `  ${c.ok ? 'ok  ' : 'FAIL'} ${c.name.padEnd(20)} ${c.detail}`),
    ].join('\n');
  }
  if (r.recovered && r.freezeMs === undefined) return `cutover #${r.cutover} of ${r.release}: recovered — the switch had committed before its holder died; ${r.to} is active`;
  const a = r.appliedAtSwitch;
  return [
    `cut over ${r.dataset}: ${r.from} → ${r.to} for ${r.release} (cutover #${r.cutover}${r.recovered ? ', finished after its holder died' : ''})`,
    `  freeze window ${r.freezeMs} ms (seal to the switch's commit); switch transaction ${r.casMs} ms`,
    `  epoch ${r.closedEpoch} sealed at ${r.barrier}; epoch ${r.openedEpoch} open on ${r.to} from ${r.sCut}`,
    `  catch-up: ${r.rounds?.pre ? `pre-seal round ${r.rounds.pre.events} events, ` : ''}final round to the barrier ${r.rounds?.final?.events ?? 0} events (root ${r.rounds?.final?.root ?? '?'}); ` +
      `${a ? `${a.events} events after the barrier applied at the switch (${a.upserted} written, ${a.flagged + a.remembered} tombstones, ${a.noops} no-ops)` : ''}`,
    `  tail re-verified: ${(r.tail?.pre?.keys ?? 0) + (r.tail?.post?.keys ?? 0)} keys changed since the approved reconciliation, 0 mismatches`,
    `  ${r.superseded ? `${r.superseded} is SUPERSEDED; ` : ''}${r.from} is RETAINED for rollback (\`genfill rollback ${r.release}\`)`,
    `  steps: ${r.steps.map((s) => `${s.step} ${s.ms} ms`).join(', ')}`,
  ].join('\n');
}

export function describeRollback(r: RollbackResult): string {
  if (r.recovered && r.freezeMs === undefined) return `rollback #${r.rollback} of ${r.release}: recovered — the switch back had committed before its holder died; ${r.to} is active`;
  const a = r.appliedAtSwitch;
  return [
    `rolled back ${r.dataset}: ${r.from} → ${r.to} for ${r.release} (rollback #${r.rollback}${r.recovered ? ', finished after its holder died' : ''}); ${r.release} is ROLLED_BACK`,
    `  freeze window ${r.freezeMs} ms (seal to the switch's commit); switch transaction ${r.casMs} ms; ${r.totalMs ? `${r.totalMs} ms in all` : ''}`,
    `  replayed into ${r.to} before the seal: ${r.replay.events} events in ${r.replay.rounds} rounds (${r.replay.upserted} written, ${r.replay.tombstones} tombstones, ${r.replay.noops} no-ops, ${r.replay.ms} ms)`,
    `  at the switch: ${a ? `${a.events} events (${a.upserted} written, ${a.flagged + a.remembered} tombstones)` : '—'}; epoch ${r.closedEpoch} sealed at ${r.barrier}, epoch ${r.openedEpoch} open on ${r.to} from ${r.sRollback}`,
    `  ${r.reactivated ? `${r.reactivated} is ACTIVE again; ` : ''}${r.from} is RETAINED (readers pinned to it keep reading); roll forward again with a new release expecting ${r.to}`,
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
    .addOption(durationOption('--wait <duration>', 'how long to wait for the projector to pass every watermark', { bareUnit: 's', defaultMs: 30_000 }))
    .option('--json', 'print the seal record as JSON')
    .action((release: string, opts: { wait: number; json?: boolean }) =>
      run(async (ctx) => {
        const r: SealResult = await viaService(ctx, { kind: 'seal', release, args: { waitMs: opts.wait } }, (db, args) =>
          sealRelease(db, release, { waitForProjectorMs: args.waitMs }),
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
        const r: UnsealResult = await viaService(ctx, { kind: 'unseal', release, args: { reason: opts.reason } }, (db, args) => unsealRelease(db, release, args.reason));
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
        const r: CatchupRound = await viaService(ctx, { kind: 'catchup', release, args: {} }, (db) => catchupRound(db, release));
        if (opts.json) return json(ctx.io, r);
        ctx.io.out(
          `catch-up round ${r.id === null ? '(empty, not recorded)' : `#${r.id}`} of ${release} into ${r.generation}: ${r.events} events (${r.upserted} written, ${r.tombstones} tombstones, ` +
            `${r.noops} no-ops${r.quarantined ? `, ${r.quarantined} quarantined` : ''}) from ${r.from} to ${r.to}${r.toBarrier ? ' (the barrier)' : ''}; root ${r.root}` +
            `${r.caughtUp ? `; ${release} INGRESS_SEALED → CAUGHT_UP` : ''}`,
        );
      }),
    );

  program
    .command('cutover <release>')
    .description(
      'switch every reader of the dataset to the release\'s generation in one step (invariants 9 and 11): a catch-up round and a check ' +
        'of the keys changed since the approved reconciliation, then the seal, the round to the barrier, the tail\'s keys checked, and ' +
        'one transaction that compares every precondition, flips the pointer and applies what arrived after the barrier. ' +
        'Exit 3 naming a failed precondition (ingress reopened on the old generation, APPROVED again), 4 for a mismatch in the tail ' +
        '(RECONCILIATION_REQUIRED with the keys); a request the projector service runs',
    )
    .option('--dry-run', 'check every precondition without sealing (exit 3 when one fails)')
    .addOption(durationOption('--max-freeze <duration>', 'abort and unseal when the freeze (seal to switch) would pass this', { bareUnit: 's', defaultMs: 30_000 }))
    .option('--json', 'print the cutover record as JSON')
    .action((release: string, opts: { dryRun?: boolean; maxFreeze: number; json?: boolean }) =>
      run(async (ctx) => {
        const args = { dryRun: opts.dryRun === true, maxFreezeMs: opts.maxFreeze };
        const r: CutoverResult = await viaService(ctx, { kind: 'cutover', release, args }, (db, parsed) => cutoverRelease(db, release, parsed));
        if (opts.json) json(ctx.io, r);
        else ctx.io.out(describeCutover(r));
        if (!r.ok) throw new RefusedError(`cutover of ${release}: ${r.checks.filter((c) => !c.ok).map((c) => `precondition ${c.name}: ${c.detail}`).join('; ')}`);
      }),
    );

  program
    .command('rollback <release>')
    .description(
      'switch every reader back to the generation the release replaced, losing no write (invariant 13): unsealed replay rounds ' +
        'bring it up to date through its own transform map, then a seal, and one transaction that applies the tail and flips the ' +
        'pointer back. Refused (exit 3) once that generation is retired, or while another release expects this one\'s generation; ' +
        'a request the projector service runs. Roll forward again with a new release',
    )
    .addOption(durationOption('--max-freeze <duration>', 'reopen ingress and give up when the freeze (seal to switch) would pass this', { bareUnit: 's', defaultMs: 30_000 }))
    .option('--json', 'print the rollback record as JSON')
    .action((release: string, opts: { maxFreeze: number; json?: boolean }) =>
      run(async (ctx) => {
        const args = { maxFreezeMs: opts.maxFreeze };
        const r: RollbackResult = await viaService(ctx, { kind: 'rollback', release, args }, (db, parsed) => rollbackRelease(db, release, parsed));
        if (opts.json) json(ctx.io, r);
        else ctx.io.out(describeRollback(r));
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
          throw errorFromPg(err, { dataset });
        }
        const r = { dataset, key, quarantine: row.id, upToRevision: row.up_to_revision };
        if (opts.json) return json(ctx.io, r);
        ctx.io.out(`quarantined ${JSON.stringify(key)} of ${dataset} up to revision ${row.up_to_revision} (#${row.id}); the projector resumes`);
      }),
    );
}
