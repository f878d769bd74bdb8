// `genfill reconcile <release>` and `genfill approve <release>`: prove or refuse a built
// candidate, and approve a proved one as the connected principal.
import type { Command } from 'commander';
import { InvalidInputError, ReconciliationRequiredError } from '@genfill/contracts';
import { approveRelease, type IncrementalResult, reconcileIncremental, defaultFindingsDir, defaultFindingsPath, driftCheck, describeFinding, exportFindings, latestReconciliation, reconcile, type ApproveResult, type ReconcileResult } from '@genfill/reconcile';
import type { Context } from '../context.ts';
import { json } from '../io.ts';
import { viaService } from '../requests.ts';

type Run = (fn: (ctx: Context) => Promise<void>) => Promise<void>;

const count = (n: number | string) => Number(n).toLocaleString('en-US');

export function describeReconciliation(r: ReconcileResult): string {
  const s = r.summary;
  const move = r.transition ? `${r.from} → ${r.state}` : `${r.state} (unchanged)`;
  const lines = [
    `${r.state === 'RECONCILED' ? 'reconciled' : 'reconciliation required'}: ${r.release} ${move}; reconciliation #${r.id} in snapshot ${r.snapshot}`,
    `  candidate   ${s.dataset}/${s.generation} over [${s.range.from}, ${s.range.to}), ${s.partitions.build} build partitions, closure ${s.closure.ok ? 'proved' : 'FAILED'}`,
    `  rows        source ${count(s.rows.source)}, stored ${count(s.rows.stored)}, dual compute ${count(s.rows.dual)}, tombstones ${count(s.rows.tombstones)}`,
    `  roots       stored keys ${s.roots.stored.keys.root} rows ${s.roots.stored.rows.root}; dual keys ${s.roots.dual.keys.root} rows ${s.roots.dual.rows.root}`,
  ];
  for (const [c, v] of Object.entries(s.conserved)) lines.push(`  conserved   ${c}: source ${v.source}, candidate ${v.candidate}${v.ok ? '' : '  DIFFERS'}`);
  if (s.oldGeneration) {
    const o = s.oldGeneration;
    const changed = Object.entries(o.changed)
      .filter(([, v]) => v.expected || v.rows !== '0')
      .map(([c, v]) => `${c} ${count(v.rows)}${v.expected ? '' : ' (NOT in expectedDiff)'}`);
    lines.push(`  vs ${s.expectedActive}  ${count(o.rows)} old rows; missing ${count(o.missing)}, extra ${count(o.extra)}; changed rows: ${changed.join(', ') || 'none'}`);
  }
  if (s.carry) {
    const c = s.carry;
    const changed = Object.entries(c.changed).map(([k, v]) => `${k} ${count(v)}`);
    lines.push(
      `  carried     outside the range vs ${s.expectedActive}: ${count(c.newRows)} rows of ${count(c.oldRows)}; missing ${count(c.missing)}, extra ${count(c.extra)}; ` +
        `changed rows: ${changed.join(', ') || 'none'} (every column must be equal there)`,
    );
  }
  if (s.live) {
    lines.push(
      `  live        verified at catch-up frontier ${s.live.catchupFrontier} (${count(s.live.rounds)} rounds); ${count(s.live.pendingKeys)} keys pending after it (not findings); ` +
        `${count(s.live.receiptsSuperseded.length)} partitions checked by dual compute alone (catch-up touched them or a pending key lives in them)`,
    );
  }
  const p = s.partitions;
  if (p.receiptMismatch + p.dualMismatch + p.conservedMismatch > 0) {
    lines.push(`  partitions  receipt mismatches ${p.receiptMismatch}, dual-compute mismatches ${p.dualMismatch}, conserved-sum mismatches ${p.conservedMismatch}`);
  }
  const rr = s.rowsRead;
  if (rr.bisectedPartitions > 0) {
    lines.push(`  bisection   ${rr.bisectedPartitions} partition${rr.bisectedPartitions === 1 ? '' : 's'}, ${count(rr.bisection)} rows read (${(rr.bisectionRatio * 100).toFixed(2)}% of a full join's ${count(rr.fullJoin)})`);
  }
  const byKind = Object.entries(r.findings.byKind).map(([k, n]) => `${k} ${count(n)}`);
  // The findings are stored under the reconciliation id; the path is their NDJSON export, when one was written.
  const where = r.findings.path ?? `the stored findings of reconciliation #${r.id}`;
  lines.push(`  findings    ${count(r.findings.count)}${byKind.length ? ` (${byKind.join(', ')})` : ''}${r.findings.path ? ` → ${r.findings.path}` : ''}`);
  for (const f of r.findings.first) lines.push(`    ${describeFinding(f)}`);
  if (r.findings.count > r.findings.first.length) lines.push(`    … ${count(r.findings.count - r.findings.first.length)} more in ${where}`);
  return lines.join('\n');
}

function describeApproval(a: ApproveResult): string {
  switch (a.outcome) {
    case 'approved':
      return `approved: ${a.release} RECONCILED → APPROVED by ${a.principal} (reconciliation #${a.reconciliationId}, ${a.approvals}/${a.required} approvals)`;
    case 'recorded':
      return `approval recorded: ${a.principal} approved reconciliation #${a.reconciliationId} of ${a.release}; ${a.approvals}/${a.required} approvals, ${a.release} stays ${a.state}`;
    case 'already-approved':
      return `already approved: ${a.principal} approved reconciliation #${a.reconciliationId} of ${a.release} before — nothing changed (${a.approvals}/${a.required} approvals, ${a.state})`;
  }
}

export function register(program: Command, run: Run): void {
  program
    .command('reconcile [release]')
    .description(
      'prove or refuse a BUILT (or RECONCILED) candidate in one snapshot: manifest closure, receipts, roots, dual compute, conserved sums, ' +
        'old vs new generation; exit 0 RECONCILED, 4 RECONCILIATION_REQUIRED with every mismatched key stored in the registry ' +
        'under the reconciliation id (and exported to an NDJSON file), 3 in any other state. With --dataset instead of a release: the ' +
        'drift check of an adopted dataset (its active generation against its transform map applied to the source; exit 4 on drift)',
    )
    .option('--dataset <name>', 'drift-check the dataset\'s active generation instead of reconciling a release')
    .option(
      '--incremental',
      'on a RECONCILED or APPROVED release: re-check only the keys changed since the latest (passing) reconciliation, each against the ' +
        'transform of its latest logged image, and record that one as the parent; approvals stay valid along a chain of passing ' +
        'reconciliations, a failing one voids them (exit 4)',
    )
    .option('--json', 'print the result as JSON')
    .option(
      '--findings-out <file>',
      'export the stored findings to this NDJSON file, even when there are none (default: .genfill/findings/reconcile-<release>-<id>.ndjson under the working directory, when there are findings)',
    )
    .action((release: string | undefined, opts: { json?: boolean; findingsOut?: string; dataset?: string; incremental?: boolean }) =>
      run(async (ctx) => {
        if (opts.incremental) {
          if (!release) throw new InvalidInputError([{ path: 'release', message: 'name the release to reconcile incrementally' }]);
          const r: IncrementalResult = await viaService(ctx, { kind: 'reconcile', release, args: { incremental: true } }, (db) => reconcileIncremental(db, release));
          if (opts.json) json(ctx.io, r);
          else {
            ctx.io.out(
              `incremental reconciliation #${r.id} of ${release} (parent #${r.parent}): ${r.keys} keys changed since ${r.since}, checked at ${r.to}` +
                `${r.quarantined ? ` (${r.quarantined} quarantined)` : ''} in ${r.ms} ms: ${r.state === 'RECONCILED' ? `passed; ${release} stays ${r.from}` : `${r.findings.count} mismatched → RECONCILIATION_REQUIRED`}`,
            );
            for (const f of r.findings.first) ctx.io.out(`  ${f.kind} ${JSON.stringify(f.key)}`);
          }
          if (r.state !== 'RECONCILED') {
            throw new ReconciliationRequiredError(
              `${release} is RECONCILIATION_REQUIRED: ${r.findings.count} keys changed since reconciliation #${r.parent} do not match the transform of their latest image ` +
                `(stored under #${r.id}); its approvals are void — repair (genfill repair ${release} --reconciliation ${r.id}) and reconcile again`,
            );
          }
          return;
        }
        if (opts.dataset !== undefined) {
          if (release) throw new InvalidInputError([{ path: '--dataset', message: 'name a release or --dataset, not both' }]);
          const d = await driftCheck(await ctx.db(), opts.dataset);
          if (opts.json) json(ctx.io, d);
          else {
            ctx.io.out(
              `drift check of ${d.dataset}/${d.generation} at frontier ${d.frontier}: ${d.verified ? 'no drift — the adopted rows are verified' : `${d.missing} rows missing or different, ${d.extra} extra`}; ` +
                `${d.pending} keys pending (changed after the frontier, left out)`,
            );
            for (const k of d.sample) ctx.io.out(`  ${JSON.stringify(k)}`);
          }
          if (!d.verified) throw new ReconciliationRequiredError(`${d.dataset} drifted from its transform map: ${d.missing + d.extra} rows; a rebuild release fixes them`);
          return;
        }
        if (!release) throw new InvalidInputError([{ path: 'release', message: 'name a release (or --dataset <name> for a drift check)' }]);
        const findingsDir = defaultFindingsDir(process.cwd());
        const target = opts.findingsOut !== undefined ? { findingsOut: opts.findingsOut } : { findingsDir };
        const result = await viaService(ctx, { kind: 'reconcile', release, args: {} }, (db) => reconcile(db, release, target));
        // Run by the reconciler service, the findings are in the registry only: export them here.
        if (result.findings.path === null && (opts.findingsOut !== undefined || result.findings.count > 0)) {
          const file = opts.findingsOut ?? defaultFindingsPath(findingsDir, release, result.id);
          result.findings.path = (await exportFindings(await ctx.db(), result.id, file, { createDir: opts.findingsOut === undefined })).path;
        }
        if (opts.json) json(ctx.io, result);
        else ctx.io.out(describeReconciliation(result));
        if (result.state === 'RECONCILIATION_REQUIRED') {
          throw new ReconciliationRequiredError(
            `${release} is RECONCILIATION_REQUIRED: ${result.findings.count} finding(s) stored under reconciliation #${result.id}` +
              `${result.findings.path ? ` (exported to ${result.findings.path})` : ''}; ` +
              `rebuild the named partitions with \`genfill repair ${release} --reconciliation ${result.id}\`, then reconcile again`,
          );
        }
      }),
    );

  program
    .command('approve <release>')
    .description(
      'approve a reconciliation of a RECONCILED release as your login (never the submitter): the one you name with --reconciliation, ' +
        'or the latest, which is printed first; refused (exit 3) unless it is the latest and it passed. ' +
        'At the required count of distinct approvers the release becomes APPROVED',
    )
    .option('--reconciliation <id>', 'the reconciliation you reviewed (default: the latest, printed before approving)')
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { reconciliation?: string; json?: boolean }) =>
      run(async (ctx) => {
        const db = await ctx.db();
        let id = opts.reconciliation ?? null;
        if (id !== null && !/^\d+$/.test(id)) throw new InvalidInputError([{ path: '--reconciliation', message: `${id} is not a reconciliation id (a number)` }]);
        if (id === null) {
          const latest = await latestReconciliation(db, release);
          if (latest) {
            id = latest.id;
            if (!opts.json) ctx.io.out(`latest reconciliation of ${release}: #${latest.id}, ${latest.state}, ${latest.findings} findings, at ${latest.at.toISOString()}`);
          }
        }
        const result = await approveRelease(db, release, id);
        if (opts.json) return json(ctx.io, result);
        ctx.io.out(describeApproval(result));
      }),
    );
}
