import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import cliProgress from 'cli-progress';
import { InvalidInputError, NotFoundError, type ReleaseState } from '@genfill/contracts';
import { projectorStatus, type ProjectorStatus, type SourceRewrite } from '@genfill/projector';
import {
  formatDuration,
  latestThrottleDecision,
  oldestPreparedTransaction,
  PARTITION_PAGE,
  PARTITION_STATUSES,
  parsePartitionListing,
  pausedBy,
  type PreparedTransactions,
  progressLine,
  ProgressMeter,
  type ProgressSample,
  type Rates,
  releaseList,
  releaseProgress,
  releaseStatus,
  type Db,
  type ReleaseStatus,
  type ThrottleDecisionSummary,
} from '@genfill/registry';
import type { Context } from '../context.ts';
import { json } from '../io.ts';
import { durationOption } from '../options.ts';

const WATCHED: readonly ReleaseState[] = ['SNAPSHOT_PINNED', 'BUILDING'];

/** The throttle's latest decision in one line: knobs out, the binding signal, the action. */
export function throttleSummary(t: ThrottleDecisionSummary | null): string {
  if (!t) return 'no decision yet';
  const n = (v: number) => Math.round(v).toLocaleString('en-US');
  const ratio = t.ratio === null ? '' : ` at ${t.ratio.toFixed(2)}× budget`;
  return `concurrency ${t.concurrency}, ${n(t.rowsPerSecond)} rows/s (${n(t.workerRowsPerSecond)}/worker × ${t.liveWorkers}); binding ${t.binding}${ratio}; ${t.action}${t.throttlePaused ? ', PAUSED' : ''}`;
}

/** The oldest prepared transaction in one line, and what it holds back. */
export function preparedSummary(p: PreparedTransactions): string {
  const o = p.oldest;
  const more = p.count > 1 ? `; ${p.count} prepared transactions in all` : '';
  return (
    `prepared    '${o.gid}' (xid ${o.xid}, database ${o.database}, owner ${o.owner}) prepared at ${o.preparedAt}, ${formatDuration(o.ageSeconds)} ago: ` +
    `it holds change-log consumption back until COMMIT PREPARED or ROLLBACK PREPARED '${o.gid}'${more}`
  );
}

export function describeStatus(s: ReleaseStatus): string {
  const paused = pausedBy(s.paused);
  const lines = [
    `release     ${s.release}`,
    `state       ${s.state} since ${s.stateChangedAt}${paused.length ? `  PAUSED (${paused.join(', ')})` : ''}`,
    `dataset     ${s.dataset}: generation ${s.generation} (expected active ${s.expectedActive ?? 'none — first generation'})`,
    `range       [${s.range.from}, ${s.range.to}) ${s.range.timezone} every ${s.range.every}`,
    `digest      ${s.digest}`,
    `submitted   by ${s.submittedBy} at ${s.submittedAt}; owner ${s.owner}; approvals required ${s.approvalsRequired}`,
  ];
  if (s.throttle || s.state === 'BUILDING') lines.push(`throttle    ${throttleSummary(s.throttle)}${s.throttle ? ` — ${s.throttle.at}` : ''}`);
  if (s.preparedTransactions) lines.push(preparedSummary(s.preparedTransactions));
  if (s.manifest) {
    const c = s.manifest.coverage;
    const counts = Object.entries(s.counts).map(([k, v]) => `${k} ${v}`).join(', ');
    lines.push(
      `partitions  ${s.manifest.partitions} (${counts})`,
      `coverage    ${c.contiguous && c.exactEnds && c.gaps === 0 && c.overlaps === 0 ? 'proved' : 'FAILED'} — boundaries ${s.manifest.boundariesSha256}`,
    );
    for (const d of s.dependencies) lines.push(`dependency  ${d.relation}: ${d.row_count} rows, hash ${d.content_hash}`);
    if (s.summary) lines.push(...describeSummary(s.release, s.summary));
    if (s.live.floor) lines.push(`floor       ${s.live.floor}`);
    if (s.live.catchupFrontier) lines.push(`catch-up    frontier ${s.live.catchupFrontier}`);
    const r = s.live.lastRound as { id: number | null; events: number; upserted: number; tombstones: number; noops: number; at: string; toBarrier: boolean } | null;
    if (r) lines.push(`  last round ${r.id === null ? '(empty, not recorded)' : `#${r.id}`} at ${r.at}${r.toBarrier ? ' (to the barrier)' : ''}: ${r.events} events, ${r.upserted} written, ${r.tombstones} tombstones, ${r.noops} no-ops`);
    if (s.live.precarry) {
      lines.push(`  NOTE: planned before carry partitions existed, ${s.release} can never be cut over: cancel it (genfill cancel ${s.release}) and submit it again`);
    }
  } else {
    lines.push('partitions  not planned yet: genfill plan ' + s.release);
  }
  for (const w of s.switches) {
    lines.push(
      `${w.kind.padEnd(11)} #${w.id} ${w.from} → ${w.to}: ${w.state}${w.state === 'RUNNING' ? ` at ${w.step} on ${w.holder}` : ''}` +
        `${w.freezeMs !== null ? `, freeze ${w.freezeMs} ms (switch ${w.casMs} ms)` : ''}${w.recoveredBy.length ? `, finished by ${w.recoveredBy.join(', ')}` : ''}` +
        `${w.reason ? ` — ${w.reason}` : ''}`,
    );
  }
  lines.push(s.historyTotal > s.history.length ? `history     (the latest ${s.history.length} of ${s.historyTotal} entries)` : 'history');
  for (const h of s.history) {
    lines.push(`  ${h.at}  ${h.action.padEnd(8)} ${h.from ?? ''}${h.from || h.to ? ' → ' : ''}${h.to ?? ''}  by ${h.principal}${h.reason ? ` (${h.reason})` : ''}`);
  }
  if (s.partitions && s.page) lines.push(...describePage(s.partitions, s.page));
  return lines.join('\n');
}

type Summary = NonNullable<ReleaseStatus['summary']>;
type Range = Summary['failed']['ranges'][number];

function rangeLine(status: string, r: Range): string {
  const span = r.partitions === 1 ? r.first : `${r.first} … ${r.last} (${r.partitions} partitions)`;
  const why = r.reason ? `: ${r.reason}${r.reasons > 1 ? ` (and ${r.reasons - 1} other reason${r.reasons > 2 ? 's' : ''})` : ''}` : '';
  return `  ${status.padEnd(7)} ${span}, attempt ${r.attempt}${why}`;
}

/** Counts by kind, failed and running partitions as ranges of consecutive ones, the slowest built. */
export function describeSummary(release: string, s: Summary): string[] {
  const lines: string[] = [];
  const kinds = Object.entries(s.byKind);
  if (kinds.length > 1) {
    for (const [kind, c] of kinds) lines.push(`  ${kind.padEnd(7)} ${Object.entries(c).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  }
  for (const [status, g] of [['FAILED', s.failed], ['RUNNING', s.running]] as const) {
    for (const r of g.ranges) lines.push(rangeLine(status, r));
    if (g.moreRanges > 0) {
      lines.push(`  … and ${g.moreRanges} more ${status.toLowerCase()} range${g.moreRanges === 1 ? '' : 's'}: genfill status ${release} --partitions ${status}`);
    }
  }
  if (s.slowest.length > 0) {
    lines.push(`slowest     ${s.slowest.map((p) => `${p.id} ${Math.round(p.totalMs).toLocaleString('en-US')} ms (${p.rowsOut.toLocaleString('en-US')} rows)`).join(', ')}`);
  }
  return lines;
}

/** One page of partitions as a table. */
export function describePage(parts: NonNullable<ReleaseStatus['partitions']>, page: NonNullable<ReleaseStatus['page']>): string[] {
  const which = page.status ?? 'all';
  const lines = [`partitions  ${which}: page ${page.number} of ${page.pages} (${page.size} a page, ${page.total} in all)`];
  if (parts.length === 0) {
    lines.push('  (none on this page)');
    return lines;
  }
  const rows = parts.map((p) => [
    String(p.seq),
    p.id,
    p.kind,
    p.status,
    String(p.attempt),
    p.receipt ? String(p.receipt.rowsOut) : p.estRows === null ? '' : `~${p.estRows}`,
    p.receipt?.timingsMs && typeof p.receipt.timingsMs.total === 'number' ? String(Math.round(p.receipt.timingsMs.total)) : '',
    p.reason ?? '',
  ]);
  const head = ['seq', 'partition', 'kind', 'status', 'attempt', 'rows', 'ms', 'reason'];
  const width = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const fmt = (r: string[]) => `  ${r.map((c, i) => (i === 0 || i === 4 || i === 5 || i === 6 ? c.padStart(width[i]!) : c.padEnd(width[i]!))).join('  ')}`.trimEnd();
  lines.push(fmt(head), ...rows.map(fmt));
  return lines;
}

function barPayload(sample: ProgressSample, rates: Rates, throttle: ThrottleDecisionSummary | null) {
  const paused = pausedBy(sample.paused);
  return {
    state: sample.state,
    rate: rates.rowsPerSecond === null ? '—' : Math.round(rates.rowsPerSecond).toLocaleString('en-US'),
    etaText: formatDuration(rates.etaSeconds),
    running: sample.running,
    failed: sample.failed,
    paused: paused.length ? ` | PAUSED (${paused.join(', ')})` : '',
    throttle: throttle ? `c${throttle.concurrency} ${Math.round(throttle.rowsPerSecond).toLocaleString('en-US')} rows/s by ${throttle.binding}` : '—',
  };
}

/**
 * Redraw progress every interval until the release leaves SNAPSHOT_PINNED/BUILDING or SIGINT,
 * then print the normal status. A terminal gets a bar; anything else (logs, CI, tests) one
 * plain line per interval.
 */
async function watch(ctx: Context, db: Db, release: string, intervalMs: number): Promise<void> {
  const meter = new ProgressMeter();
  const stop = new AbortController();
  const onSigint = () => stop.abort();
  process.once('SIGINT', onSigint);
  let bar: cliProgress.SingleBar | undefined;
  try {
    for (let first = true; ; first = false) {
      const sample = await releaseProgress(db, release);
      const rates = meter.add(sample);
      const throttle = await latestThrottleDecision(db, release);
      const watched = WATCHED.includes(sample.state);
      if (first && !watched) break; // nothing to watch: just the status
      if (ctx.io.tty) {
        if (!bar) {
          // cli-progress needs a real terminal stream to redraw in place; Io.out is line-based.
          bar = new cliProgress.SingleBar(
            {
              stream: process.stdout,
              format: `${release} {state} {bar} {value}/{total} partitions | {rate} rows/s | ETA {etaText} | {running} running | {failed} failed | throttle {throttle}{paused}`,
              hideCursor: true,
            },
            cliProgress.Presets.shades_classic,
          );
          bar.start(sample.total, sample.built, barPayload(sample, rates, throttle));
        }
        bar.setTotal(sample.total);
        bar.update(sample.built, barPayload(sample, rates, throttle));
      } else {
        ctx.io.out(`${progressLine(sample, rates)}; throttle ${throttleSummary(throttle)}`);
      }
      if (!watched || stop.signal.aborted) break;
      try {
        await sleep(intervalMs, undefined, { signal: stop.signal });
      } catch {
        break;
      }
    }
  } finally {
    bar?.stop();
    process.off('SIGINT', onSigint);
  }
  ctx.io.out(describeStatus(await releaseStatus(db, release)));
}

/** A change of the source without DML that no drift check has verified since: cutovers wait for one. */
function describeSourceRewrite(dataset: string, r: SourceRewrite): string[] {
  const what = `  SOURCE REWRITTEN at ${r.at}: ${r.command} on ${r.table} (${r.reasons.join(', ')}) by ${r.principal} changed rows without DML; cutovers are refused until a drift check verifies the active generation`;
  if (!r.driftCheck) return [what, `    run \`genfill reconcile --dataset ${dataset}\``];
  return [
    what,
    `    the drift check at ${r.driftCheck.at} found ${r.driftCheck.missing} missing and ${r.driftCheck.extra} extra rows (keys ${JSON.stringify(r.driftCheck.sample ?? [])}):`,
    `    UPDATE those keys of ${r.table} (a column set to itself logs them), let the projector apply them, then run \`genfill reconcile --dataset ${dataset}\` again`,
  ];
}

function describeDatasetStatus(s: ProjectorStatus): string {
  const lines = [`dataset ${s.dataset}: active generation ${s.generation ?? '(none)'}, source ${s.sourceTable ?? '(not captured)'}`];
  lines.push(
    s.frontier
      ? `  projector frontier ${s.frontier} (updated ${s.frontierUpdatedAt}); pending ${s.pendingEvents}${s.pendingCapped ? '+' : ''} events, lag ${s.lagSeconds.toFixed(2)} s${s.oldestPendingAt ? `, oldest pending ${s.oldestPendingAt}` : ''}`
      : '  no projector frontier: adopt the dataset (it installs capture and records the first frontier)',
  );
  lines.push(`  ingress ${s.ingress}, epoch ${s.epoch}${s.seal ? `: sealed by ${s.seal.sealedBy} for ${s.seal.release} at ${s.seal.sealedAt} (held ${s.seal.heldSeconds.toFixed(1)} s), barrier ${s.seal.barrier}` : ''}`);
  lines.push(s.lease ? `  lease: ${s.lease.holder} (token ${s.lease.token}) until ${s.lease.expiresAt}${s.lease.live ? '' : ' — expired: no projector is running'}` : '  lease: none (no projector has run)');
  if (s.stop) lines.push(`  STOPPED at key ${JSON.stringify(s.stop.key)} (event ${s.stop.eventId}): ${s.stop.error}\n    fix the transform, or: genfill quarantine ${s.dataset} --key '${JSON.stringify(s.stop.key)}' --reason …`);
  if (s.quarantinedKeys > 0) lines.push(`  quarantined keys: ${s.quarantinedKeys}`);
  if (s.dependencyStaleSince) lines.push(`  DEPENDENCY_STALE since ${s.dependencyStaleSince}: ${s.staleRelations.join(', ')} changed; a rebuild release clears it`);
  if (s.sourceRewrite) lines.push(...describeSourceRewrite(s.dataset, s.sourceRewrite));
  if (s.adoptUnverified) lines.push(`  adopted rows unverified: \`genfill reconcile --dataset ${s.dataset}\` compares them with the transform map`);
  lines.push(...describeDriftCheck(s));
  if (s.oldestPrepared) lines.push(`  prepared transaction ${s.oldestPrepared.gid} (since ${s.oldestPrepared.prepared}, ${s.oldestPrepared.owner}) holds every frontier back`);
  lines.push(s.readers.length === 0 ? '  readers: no live reader lease' : `  readers: ${s.readers.length} live reader lease${s.readers.length === 1 ? '' : 's'}`);
  for (const r of s.readers) lines.push(`    generation ${r.generation}  holder ${r.holder}  by ${r.principal}  until ${r.expiresAt} (since ${r.takenAt})`);
  lines.push(...describeRetention(s));
  return lines.join('\n');
}

/** The drift check's last verdict (issue 29): what it found, when, and whether it checked the active generation. */
function describeDriftCheck(s: ProjectorStatus): string[] {
  const v = s.lastDriftCheck;
  if (!v) return [`  drift check: none yet (the reconciler service checks every GENFILL_DRIFT_CHECK_EVERY; \`genfill reconcile --dataset ${s.dataset}\` now)`];
  const what =
    v.driftedRows === 0
      ? 'no drift'
      : `DRIFTED: ${v.driftedRows} rows (${v.missingRows} missing or different, ${v.extraRows} extra), ${v.driftedKeys} keys — a rebuild release fixes them`;
  const lines = [
    `  drift check #${v.id} of ${v.generation}${v.current ? '' : ' (not the active generation: the new one is checked next)'} at ${v.finishedAt} (${v.reason}): ${what}; ${v.rowsChecked} rows checked, ${v.pendingKeys} keys pending`,
  ];
  for (const k of v.keySample) lines.push(`    drifted key ${JSON.stringify(k)}`);
  if (v.driftedKeys > v.keySample.length) lines.push(`    … and ${v.driftedKeys - v.keySample.length} more`);
  return lines;
}

function bytes(n: number | null): string {
  if (n === null) return 'size unknown';
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(u === 0 ? 0 : 1)} ${units[u]}`;
}

/** Retained generations (until when, why, size) and the change log's horizon with what holds it. */
export function describeRetention(s: ProjectorStatus): string[] {
  const lines: string[] = [];
  const kept = s.retained ?? [];
  lines.push(kept.length === 0 ? '  retained: no generation is kept after a switch' : `  retained: ${kept.length} generation${kept.length === 1 ? '' : 's'}`);
  for (const g of kept) {
    const left = g.leftBy ? `${g.leftBy === 'cancel' ? 'abandoned by the cancel of' : g.leftBy === 'cutover' ? 'replaced by' : 'rolled back:'} ${g.leftByRelease} at ${g.leftAt}` : 'no switch recorded';
    if (g.state === 'RETIRED') {
      const table = g.detachPending ? 'its table is detaching (pending: the reconciler finalizes it)' : g.tableAttached ? 'its table is still attached' : 'its table is detached, not dropped yet';
      lines.push(`    ${g.generation}  RETIRED, ${table} — ${bytes(g.bytes)}; the reconciler drops it (it needs an owner connection: GENFILL_OWNER_DATABASE_URL or a login in genfill_owner)`);
      continue;
    }
    lines.push(`    ${g.generation}  ${g.state}, ${left}; ${g.retirable ? 'retirable now: the reconciler retires it next round' : `kept until ${g.retainUntil ?? 'an operator decides'}`} — ${bytes(g.bytes)}`);
    for (const h of g.holds) lines.push(`      why: ${h}`);
  }
  const h = s.logHorizon;
  if (h) {
    lines.push(`  log horizon ${h.horizon} (${h.ageSeconds.toFixed(1)} s behind); ${h.prunablePartitions} partition${h.prunablePartitions === 1 ? '' : 's'} below it still attached`);
    for (const p of h.holders) lines.push(`    held by the ${p.kind} of ${p.dataset} ${p.subject}${p.since ? ` (since ${p.since})` : ''}`);
    for (const t of h.transactions) {
      // A person's login sees kind, xid and start only; the session's details are the service's (migration 0025).
      const who =
        t.kind === 'prepared'
          ? `prepared transaction '${t.gid}' (xid ${t.xid}${t.role ? `, owner ${t.role}` : ''})`
          : `transaction ${t.xid}${t.pid !== null ? ` (pid ${t.pid}, ${t.role}${t.application ? `, ${t.application}` : ''}, ${t.sessionState})` : ''}`;
      lines.push(`    waits for ${who} running since ${t.started} (${t.ageSeconds.toFixed(0)} s): the log is kept from it on until it ends`);
    }
    if (h.lastPrune) lines.push(`    last pruned ${h.lastPrune.at}: ${h.lastPrune.what}${h.lastPrune.partition ? ` ${h.lastPrune.partition}` : ''}, ${h.lastPrune.rows} rows`);
  }
  return lines;
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('status [release]')
    .description('show a release: state, pause flags, manifest, a summary of its partitions (counts, failed and running ranges, the slowest), history (all releases when none is named)')
    .option('--json', 'print the status as JSON: the summary, no partition list unless --partitions asks for one')
    .option('--partitions [status]', `list the partitions, one page at a time: all, or those of one status (${PARTITION_STATUSES.join(', ')})`)
    .option('--page <n>', 'with --partitions: which page (default 1)')
    .option('--page-size <k>', `with --partitions: partitions a page (default ${PARTITION_PAGE.size.toLocaleString('en-US')}, at most ${PARTITION_PAGE.maxSize.toLocaleString('en-US')})`)
    .option('--watch', 'redraw build progress (partitions, rows/s, ETA, failures, pause) until the release leaves BUILDING, then print the status')
    .addOption(durationOption('--interval <duration>', 'with --watch: time between redraws', { bareUnit: 's', defaultMs: 2000 }))
    .option('--dataset <name>', 'show the live path of a dataset instead: projector lag, epoch and seal, lease, stops, flags, reader leases, retained generations, the log horizon')
    .action((release: string | undefined, opts: { json?: boolean; watch?: boolean; interval: number; dataset?: string; partitions?: string | true; page?: string; pageSize?: string }) =>
      run(async (ctx) => {
        // Checked before anything is read: bad input writes and prints nothing.
        const listing = parsePartitionListing(opts, { partitions: '--partitions', page: '--page', pageSize: '--page-size' });
        if (listing && (!release || opts.dataset || opts.watch)) {
          throw new InvalidInputError([{ path: '--partitions', message: 'lists the partitions of one named release (not with --dataset or --watch)' }]);
        }
        const db = await ctx.db();
        if (opts.dataset) {
          if (release) throw new InvalidInputError([{ path: '--dataset', message: 'name a release or --dataset, not both' }]);
          const s = await projectorStatus(db, opts.dataset, { retention: true });
          if (!s) throw new NotFoundError(`dataset ${opts.dataset} does not exist`);
          if (opts.json) return json(ctx.io, s);
          return ctx.io.out(describeDatasetStatus(s));
        }
        if (opts.watch) {
          if (!release) throw new InvalidInputError([{ path: 'release', message: '--watch needs a release' }]);
          if (opts.json) throw new InvalidInputError([{ path: '--json', message: '--watch draws progress for people; use --json without it' }]);
          return watch(ctx, db, release, opts.interval);
        }
        if (!release) {
          const list = await releaseList(db);
          // The list stays an array (GET /releases returns the same); a release's status has the field.
          if (opts.json) return json(ctx.io, list);
          if (list.length === 0) ctx.io.out('no releases: submit one with `genfill release submit <file>`');
          for (const r of list) ctx.io.out(`${r.release.padEnd(32)} ${r.state.padEnd(24)} ${r.dataset}/${r.generation}  [${r.range.from}, ${r.range.to})`);
          const prepared = await oldestPreparedTransaction(db);
          if (prepared) ctx.io.out(preparedSummary(prepared));
          return;
        }
        const status = await releaseStatus(db, release, listing ? { partitions: listing } : {});
        if (opts.json) return json(ctx.io, status);
        ctx.io.out(describeStatus(status));
      }),
    );
}
