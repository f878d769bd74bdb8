// `genfill reconcile <release>` and `genfill approve <release>`: prove or refuse a built
// candidate, and approve a proved one as the connected principal.
import type { Command } from 'commander';
import { ReconciliationRequiredError } from '@genfill/contracts';
import { approveRelease, describeFinding, reconcile, type ApproveResult, type ReconcileResult } from '@genfill/reconcile';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

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
  const p = s.partitions;
  if (p.receiptMismatch + p.dualMismatch + p.conservedMismatch > 0) {
    lines.push(`  partitions  receipt mismatches ${p.receiptMismatch}, dual-compute mismatches ${p.dualMismatch}, conserved-sum mismatches ${p.conservedMismatch}`);
  }
  const rr = s.rowsRead;
  if (rr.bisectedPartitions > 0) {
    lines.push(`  bisection   ${rr.bisectedPartitions} partition${rr.bisectedPartitions === 1 ? '' : 's'}, ${count(rr.bisection)} rows read (${(rr.bisectionRatio * 100).toFixed(2)}% of a full join's ${count(rr.fullJoin)})`);
  }
  const byKind = Object.entries(r.findings.byKind).map(([k, n]) => `${k} ${count(n)}`);
  lines.push(`  findings    ${count(r.findings.count)}${byKind.length ? ` (${byKind.join(', ')})` : ''} → ${r.findings.path}`);
  for (const f of r.findings.first) lines.push(`    ${describeFinding(f)}`);
  if (r.findings.count > r.findings.first.length) lines.push(`    … ${count(r.findings.count - r.findings.first.length)} more in ${r.findings.path}`);
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
    .command('reconcile <release>')
    .description(
      'prove or refuse a BUILT (or RECONCILED) candidate in one snapshot: manifest closure, receipts, roots, dual compute, conserved sums, ' +
        'old vs new generation; exit 0 RECONCILED, 4 RECONCILIATION_REQUIRED with every mismatched key in an NDJSON file, 3 in any other state',
    )
    .option('--json', 'print the result as JSON')
    .option('--findings-out <file>', 'where the NDJSON findings go (default ./reconcile-<release>-<id>.ndjson)')
    .action((release: string, opts: { json?: boolean; findingsOut?: string }) =>
      run(async (ctx) => {
        const result = await reconcile(await ctx.db(), release, { findingsOut: opts.findingsOut });
        if (opts.json) json(ctx.io, result);
        else ctx.io.out(describeReconciliation(result));
        if (result.state === 'RECONCILIATION_REQUIRED') {
          throw new ReconciliationRequiredError(
            `${release} is RECONCILIATION_REQUIRED: ${result.findings.count} finding(s) in ${result.findings.path}; ` +
              `rebuild the named partitions with \`genfill repair ${release} --findings ${result.findings.path}\`, then reconcile again`,
          );
        }
      }),
    );

  program
    .command('approve <release>')
    .description(
      'approve the latest reconciliation of a RECONCILED release as your login (never the submitter); ' +
        'at the required count of distinct approvers the release becomes APPROVED',
    )
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { json?: boolean }) =>
      run(async (ctx) => {
        const result = await approveRelease(await ctx.db(), release);
        if (opts.json) return json(ctx.io, result);
        ctx.io.out(describeApproval(result));
      }),
    );
}
