// `genfill demo`: the whole story on a seeded dataset, so a newcomer sees the product work
// before writing a release of their own. Every step is the same call an operator's verb
// makes, and each is safe to repeat, so running the demo again only re-prints the story.
// genfill's services run as the plain logins an operator makes (demo/logins.ts): the fleet's
// steps as genfill_demo_fleet, the API as genfill_demo_api, submit and approve as two persons;
// the URL the demo is given is its one owner connection (migrate, seed, adopt).
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidArgumentError, type Command } from 'commander';
import { ReconciliationRequiredError, RefusedError } from '@genfill/contracts';
import { adoptDataset, submitRelease, type PlanResult } from '@genfill/planner';
import { migrate, receiptSummary, type Db, type ReceiptSummary } from '@genfill/registry';
import { openPinnedRead } from '@genfill/reads';
import { approveRelease, type ApproveResult, latestReconciliation, reconcile, type ReconcileResult } from '@genfill/reconcile';
import { Context } from '../context.ts';
import { planWithDispatch } from '../dispatch.ts';
import { startDemoApi, type DemoApi } from '../demo/api.ts';
import { buildWithWorkers, type DemoBuild } from '../demo/build.ts';
import { writeAdoptTransform, writeDemoRelease } from '../demo/files.ts';
import { seedDemo } from '../demo/seed.ts';
import { startLivePath, type LivePath } from '../demo/live.ts';
import { DEMO_LOGINS, demoPool, ensureDemoLogins, urlOf } from '../demo/logins.ts';
import { json } from '../io.ts';
import { durationOption } from '../options.ts';
import { describePlan } from './plan.ts';
import { describeCutover } from './projector.ts';
import { describeReconciliation } from './reconcile.ts';
import { catchupRound, cutoverRelease, type CutoverResult } from '@genfill/switch';

const RELEASE = 'order-tax-fix@3';
const MIN_ROWS = 1000;

function parseRows(value: string): number {
  const n = Number(value.replaceAll('_', ''));
  if (!/^\d[\d_]*$/.test(value) || !Number.isSafeInteger(n) || n < MIN_ROWS) {
    throw new InvalidArgumentError(`expected a whole number of at least ${MIN_ROWS}`);
  }
  return n;
}

const secs = (ms: number) => Math.round(ms / 100) / 10;

function parseWorkers(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 16) throw new InvalidArgumentError('expected 1 to 16');
  return n;
}

function parseBounded(value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < min || n > max) throw new InvalidArgumentError(`expected a whole number from ${min} to ${max}`);
  return n;
}

/** The demo's steps in order; `--until <step>` stops after one of them. */
const STEPS = ['migrate', 'seed', 'adopt', 'submit', 'plan', 'build', 'reconcile', 'approve', 'cutover'] as const;
type Step = (typeof STEPS)[number];
/** What an operator runs next when the demo stopped after a step. */
const NEXT: Record<Step, string> = {
  migrate: 'genfill demo',
  seed: 'genfill demo',
  adopt: `genfill release submit <dir>/order-tax-fix.yaml`,
  submit: `genfill plan ${RELEASE}`,
  plan: `genfill worker --release ${RELEASE}`,
  build: `genfill reconcile ${RELEASE}`,
  reconcile: `genfill approve ${RELEASE} (as another person)`,
  approve: `genfill cutover ${RELEASE}`,
  cutover: '',
};

function parseStep(value: string): Step {
  if (!(STEPS as readonly string[]).includes(value)) throw new InvalidArgumentError(`expected one of ${STEPS.join(', ')}`);
  return value as Step;
}

/**
 * Approval is never the submitter's: the demo approves as its approver login, a person other
 * than the operator who submitted (demo/logins.ts).
 */
async function approveAsAnotherPerson(ctx: Context): Promise<ApproveResult> {
  const approver = await demoPool(ctx.config, 'approver', 1);
  try {
    // The approver reviews the latest reconciliation and approves exactly that one.
    const latest = await latestReconciliation(approver, RELEASE);
    return await approveRelease(approver, RELEASE, latest?.id ?? null);
  } finally {
    await approver.end();
  }
}

function describeReceipts(r: ReceiptSummary, build: DemoBuild | null): string {
  const t = r.timingsMs;
  const share = (k: string) => (t.total ? `${Math.round((100 * (t[k] ?? 0)) / t.total)}%` : '—');
  const lines = [
    `      receipts    ${r.receipts} of ${r.partitions} partitions; ${count(r.rowsIn)} source rows in, ${count(r.rowsOut)} rows out`,
    `      attempts    max ${r.maxAttempt}; ${r.retriedPartitions} partition(s) needed more than one`,
    `      conserved   ${r.conservedEqual === null ? 'none declared' : r.conservedEqual ? 'source and candidate sums equal in every receipt' : 'SUMS DIFFER'}`,
    `      where time  statement ${share('statement')}, prepare ${share('prepare')}, claim ${share('claim')}, fence+receipt ${share('fence')} of ${count(Math.round((t.total ?? 0) / 1000))} worker-seconds`,
  ];
  if (build) lines.push(`      build       ${secs(build.seconds * 1000)}s with ${build.workers} workers: ${count(Math.round(r.rowsOut / Math.max(build.seconds, 0.001)))} rows/s`);
  return lines.join('\n');
}
const count = (n: number) => n.toLocaleString('en-US');

function coverageProved(plan: PlanResult): boolean {
  const c = plan.coverage;
  return c.contiguous && c.exactEnds && c.gaps === 0 && c.overlaps === 0;
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('demo')
    .description('the whole story on a seeded dataset, then a summary; safe to run again')
    .option('--rows <n>', `orders to seed inside the release's year (at least ${MIN_ROWS})`, parseRows, 1_200_000)
    .option('--dir <path>', 'where the demo writes its release and transform files', '.genfill/demo')
    .option('--workers <n>', 'worker processes that build the candidate', (v) => parseWorkers(v), 2)
    .option('--no-throttle', 'build without the throttle (it paces by replica lag, a canary and errors)')
    .option('--until <step>', `stop after this step (${STEPS.join(', ')}), e.g. build to reconcile by hand`, parseStep, 'cutover' as Step)
    .option('--writer-rate <n>', 'transactions per second of the live order writer (1 to 2000)', (v) => parseBounded(v, 1, 2000), 20)
    .addOption(
      durationOption('--in-range-seconds <duration>', 'how long the writer goes on writing (inside the range too) between the approval and the cutover (at most 10m)', {
        bareUnit: 's',
        defaultMs: 3000,
        bounds: { max: 600_000 },
      }),
    )
    .option('--json', 'print one JSON object with every result instead of the story')
    .action((opts: { rows: number; dir: string; workers: number; throttle: boolean; until: Step; writerRate: number; /** milliseconds, parsed as a duration */ inRangeSeconds: number; json?: boolean }) =>
      run(async (ctx) => {
        // With --json stdout carries the one object and nothing else.
        const say = (line: string) => (opts.json ? undefined : ctx.io.out(line));
        const phases: Record<string, number> = {};
        const started = performance.now();
        const phase = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
          const t0 = performance.now();
          const result = await fn();
          phases[name] = secs(performance.now() - t0);
          return result;
        };
        const took = (name: string) => `(${phases[name]}s)`;
        const results: Record<string, unknown> = { release: RELEASE };
        // True when the demo stops after `step`: says what to run next (or prints the JSON so far).
        const stopsAfter = (step: Step): boolean => {
          if (opts.until !== step) return false;
          if (opts.json) json(ctx.io, { ...results, stoppedAfter: step, phases, totalSeconds: secs(performance.now() - started) });
          else say(`stopped after ${step} (--until ${step}); next: ${NEXT[step].replace('<dir>', dir)}`);
          return true;
        };

        const dir = resolve(opts.dir);
        results.dir = dir;
        mkdirSync(dir, { recursive: true });
        say(`genfill demo: release ${RELEASE} on a seeded orders dataset; files in ${dir}`);

        const migrated = await phase('migrate', () => migrate(ctx.rawDb()));
        say(`[1/9] migrate: registry schema at version ${migrated.version} ${took('migrate')}`);
        if (stopsAfter('migrate')) return;
        const db = await ctx.db();

        say(`[2/9] seed: ${count(opts.rows)} orders in the release's year, more outside it`);
        const seeded = await phase('seed', () => seedDemo(db, { rows: opts.rows, log: (line) => say(`      ${line}`) }));
        say(`      ${seeded.seeded ? 'seeded' : 'already seeded'}: public.orders holds ${count(seeded.orders)} orders ${took('seed')}`);
        results.orders = { ...seeded, inRange: opts.rows };
        // The connection the demo was given is its one owner connection (migrate, the seed, adopt
        // with capture install); every genfill service below runs as a plain login it makes here.
        await ensureDemoLogins(db);
        const logins = Object.fromEntries(Object.entries(DEMO_LOGINS).map(([who, l]) => [who, l.login]));
        results.logins = logins;
        say(
          `      logins: the fleet as ${logins.fleet} (genfill_service), the API as ${logins.api} (genfill_api), ` +
            `${logins.operator} submits, ${logins.approver} approves — plain logins, each person mapped`,
        );
        if (stopsAfter('seed')) return;

        // The table the old pipeline built becomes generation tax-fix-g2, the release's expectedActive.
        const adoptTransform = writeAdoptTransform(dir);
        // A run after the cutover finds tax-fix-g3 active: adopt was done by the first run.
        const { rowCount: cutEarlier } = await db.query(`SELECT 1 FROM genfill.releases WHERE id = $1 AND state IN ('ACTIVE', 'SUPERSEDED', 'ROLLED_BACK', 'RETIRED')`, [RELEASE]);
        const after = cutEarlier
          ? (await db.query<{ rows: number }>(`SELECT count(*)::int AS rows FROM genfill_data.orders_enriched WHERE generation = 'tax-fix-g2'`)).rows
          : [];
        const adopted: Awaited<ReturnType<typeof adoptDataset>> = after[0]
          ? { status: 'already-adopted', dataset: 'orders_enriched', generation: 'tax-fix-g2', rows: after[0].rows, frontier: null, captured: [] }
          : await phase('adopt', () =>
          adoptDataset(db, {
            dataset: 'orders_enriched',
            source: 'public.orders',
            key: ['order_id'],
            time: 'created_at',
            table: 'public.orders_enriched',
            generation: 'tax-fix-g2',
            transformFile: adoptTransform,
            // The legacy transform reads the rates too: captured with the source (as the owner),
            // so a rate change flags the dataset and the release (which declares it) plans.
            dependencies: ['public.tax_rates'],
          }),
        );
        say(
          `[3/9] adopt: ${adopted.status === 'adopted' ? 'adopted' : 'already adopted'} public.orders_enriched as ` +
            `${adopted.dataset} generation ${adopted.generation} (${count(adopted.rows)} rows) ${phases.adopt === undefined ? '' : took('adopt')}`,
        );
        results.adopt = adopted;
        if (stopsAfter('adopt')) return;

        // From here on the old application keeps writing, and the projector keeps the active
        // generation current: the view follows its writer for the rest of the demo.
        // The fleet's steps run here as the fleet's login (a Context of its own, so planning
        // runs in this process as a service login does); the operator submits as the operator.
        const fleetUrl = urlOf(ctx.config, 'fleet');
        const fleetCtx = new Context({ ...ctx.io, env: { ...ctx.io.env, DATABASE_URL: fleetUrl } });
        const fleet = await demoPool(ctx.config, 'fleet', 6, { fleet: true });
        let operator: Db | null = null;
        let api: DemoApi | null = null;
        const live: LivePath = await startLivePath(ctx, { seededOrders: seeded.orders, ratePerSecond: opts.writerRate, projectorUrl: fleetUrl });
        say(`      live: an order writer (${opts.writerRate} transactions/s, outside the release's range until the build starts) and the projector (as ${logins.fleet}) run from now on`);
        try {
        api = await startDemoApi({ env: ctx.io.env, databaseUrl: urlOf(ctx.config, 'api') });
        operator = await demoPool(ctx.config, 'operator', 2);

        const releaseFile = writeDemoRelease(dir);
        const submitted = await phase('submit', () => submitRelease(releaseFile, operator!));
        say(
          `[4/9] submit: ${submitted.status} ${submitted.release} (${submitted.partitions} partitions, digest ${submitted.digest}) ${took('submit')}`,
        );
        results.releaseFile = releaseFile;
        results.submit = submitted;
        if (stopsAfter('submit')) return;

        const plan = await phase('plan', () => planWithDispatch(fleetCtx, RELEASE));
        say(`[5/9] plan ${took('plan')}`);
        say(describePlan(plan).replace(/^/gm, '      '));
        results.plan = plan;
        results.coverageProved = coverageProved(plan);
        if (stopsAfter('plan')) return;

        // Two worker processes build the candidate; a second run finds it built already.
        let build: DemoBuild | null = null;
        if (plan.state === 'BUILDING') {
          // The build runs under the live writer, inside the range too: what a partition's
          // snapshot missed reaches the candidate by catch-up, key by key.
          live.writeInRange();
          say(`[6/9] build: ${opts.workers} worker processes build ${RELEASE} into tax-fix-g3, the writer now writing inside the range too`);
          build = await phase('build', () => buildWithWorkers(db, { release: RELEASE, workers: opts.workers, throttle: opts.throttle, env: { ...ctx.io.env, DATABASE_URL: fleetUrl }, say: (l) => say(`      ${l}`) }));
          if (build.state !== 'BUILT') {
            throw new RefusedError(`the build stopped with ${build.failed} failed partition(s) and the release ${build.state}: see \`genfill status ${RELEASE}\``);
          }
        } else {
          say(`[6/9] build: ${RELEASE} is ${plan.state} already`);
        }
        const receipts: ReceiptSummary = await receiptSummary(db, RELEASE);
        say(describeReceipts(receipts, build));
        results.build = build;
        results.receipts = receipts;
        if (build) {
          // What the writer did during the build: events the partitions' snapshots already held,
          // then one catch-up round (applied, no-ops) and what is still waiting after it.
          const round = await phase('catchup', () => catchupRound(fleet, RELEASE));
          const { rows: ev } = await db.query<{ held: number; waiting: number }>(
            `WITH l AS (SELECT l.txid FROM genfill.change_log l JOIN genfill.captures c ON c.source_table = l.source_table
                         WHERE c.relid = 'public.orders'::regclass),
                  f AS (SELECT floor FROM genfill.release_floors WHERE release = $1)
             SELECT (SELECT count(*)::int FROM l, f WHERE l.txid >= pg_snapshot_xmin(f.floor) AND NOT pg_visible_in_snapshot(l.txid, f.floor)
                        AND pg_visible_in_snapshot(l.txid, $2::pg_snapshot)) AS held,
                    (SELECT count(*)::int FROM l WHERE l.txid >= pg_snapshot_xmin($3::pg_snapshot) AND NOT pg_visible_in_snapshot(l.txid, $3::pg_snapshot)) AS waiting`,
            [RELEASE, round.from, round.to],
          );
          const c = { round: round.id, heldByWatermarks: ev[0]!.held, applied: round.upserted + round.tombstones, noops: round.noops, events: round.events, waiting: ev[0]!.waiting, ms: round.ms };
          results.catchup = c;
          say(
            `      live during the build: ${count(c.heldByWatermarks)} events held by the partitions' watermarks (the build read them); ` +
              `catch-up round ${c.round === null ? '(empty, not recorded)' : `#${c.round}`}: ${count(c.events)} latest events per key, ${count(c.applied)} applied, ${count(c.noops)} no-ops (${c.ms} ms); ` +
              `${count(c.waiting)} events waiting after it ${took('catchup')}`,
          );
        }
        if (stopsAfter('build')) return;

        // The reconciler proves the candidate with its own queries; another person approves.
        let reconciliation: ReconcileResult | null = null;
        const before = (await db.query<{ state: string }>('SELECT state FROM genfill.releases WHERE id = $1', [RELEASE])).rows[0]!.state;
        if (before === 'BUILT' || before === 'RECONCILED') {
          reconciliation = await phase('reconcile', () => reconcile(fleet, RELEASE, { findingsDir: dir }));
          say(`[7/9] reconcile ${took('reconcile')}`);
          say(describeReconciliation(reconciliation).replace(/^/gm, '      '));
          if (reconciliation.state !== 'RECONCILED') {
            throw new ReconciliationRequiredError(
              `${RELEASE} is RECONCILIATION_REQUIRED: ${reconciliation.findings.count} findings stored under reconciliation #${reconciliation.id}` +
                `${reconciliation.findings.path ? `, exported to ${reconciliation.findings.path}` : ''}`,
            );
          }
        } else {
          say(`[7/9] reconcile: ${RELEASE} is ${before} already`);
        }
        results.reconciliation = reconciliation;
        if (stopsAfter('reconcile')) return;
        const approval = await phase('approve', () => approveAsAnotherPerson(ctx));
        say(`[8/9] approve as ${approval.principal}: ${approval.outcome}, ${approval.approvals}/${approval.required} → ${approval.state} ${took('approve')}`);

        results.approval = approval;
        if (stopsAfter('approve')) return;

        // The build is proved; the writer goes on inside the range a while — those changes reach
        // the candidate by catch-up and are checked key by key before and after the seal.
        live.writeInRange();
        await sleep(opts.inRangeSeconds);
        const stateNow = (await db.query<{ state: string }>('SELECT state FROM genfill.releases WHERE id = $1', [RELEASE])).rows[0]!.state;
        let cut: CutoverResult | null = null;
        if (stateNow === 'APPROVED') {
          // A report that pins the old generation before the cutover reads it to its end after it.
          const report = await openPinnedRead(db, { dataset: 'orders_enriched', holder: 'genfill-demo-report' });
          const first = await report.page({ limit: 10_000 });
          cut = await phase('cutover', () => cutoverRelease(fleet, RELEASE, {}));
          say(`[9/9] cutover under the live writer ${took('cutover')}`);
          say(describeCutover(cut).replace(/^/gm, '      '));
          const pinned = { generation: report.generation, rows: first.rows.length, pages: 1, pagesAfterCutover: 0, generations: [first.generation] };
          for (let cursor = first.nextCursor; cursor; ) {
            const p = await report.page({ cursor, limit: 10_000 });
            pinned.rows += p.rows.length;
            pinned.pages += 1;
            pinned.pagesAfterCutover += 1;
            if (!pinned.generations.includes(p.generation)) pinned.generations.push(p.generation);
            cursor = p.nextCursor;
          }
          await report.close();
          results.pinnedReader = pinned;
          say(
            `      pinned reader: started on ${pinned.generation} before the cutover, read ${count(pinned.rows)} rows in ${pinned.pages} pages ` +
              `(${pinned.pagesAfterCutover} after the switch), all of ${pinned.generations.join(', ')}`,
          );
          if (pinned.generations.length !== 1) throw new RefusedError(`the pinned reader saw generations ${pinned.generations.join(', ')}`);
        } else {
          say(`[9/9] cutover: ${RELEASE} is ${stateNow} already`);
        }
        results.cutover = cut;

        // The writer keeps going a moment on the new generation, then stops; the projector
        // drains and the view must equal the active generation's transform map of the source.
        const liveResult = await phase('live', () => live.finish({ seconds: 1 }));
        results.live = liveResult;
        say(
          `      live: ${count(liveResult.writer.transactions)} writer transactions (${liveResult.writer.inserts} inserts, ${liveResult.writer.updates} updates, ` +
            `${liveResult.writer.moves} moved, ${liveResult.writer.deletes} deleted); projector ${count(liveResult.projector.events)} events in ` +
            `${liveResult.projector.batches} batches, lag p95 ${liveResult.projector.lagP95Ms} ms; view (${liveResult.generation}) vs its transform map of the source: ` +
            `${liveResult.differences === 0 ? 'equal' : `${liveResult.differences} DIFFERENCES`} ${took('live')}`,
        );
        if (liveResult.differences !== 0) throw new RefusedError(`the view of orders_enriched differs from its transform map applied to public.orders in ${liveResult.differences} rows`);

        // The API service, running as its plain genfill_api login, answers what a person sees.
        const viaApi = await api.get(`/releases/${encodeURIComponent(RELEASE)}`);
        const apiState = (viaApi.body as { state?: string }).state ?? null;
        results.api = { login: logins.api, url: api.url, status: viaApi.status, state: apiState };
        say(`      api: genfill api as ${logins.api} at ${api.url}: GET /releases/${RELEASE} → ${viaApi.status}, ${apiState}`);
        if (viaApi.status !== 200) throw new RefusedError(`the demo's API answered ${viaApi.status} for /releases/${RELEASE}: ${JSON.stringify(viaApi.body)}`);

        const total = secs(performance.now() - started);
        if (opts.json) {
          return json(ctx.io, { ...results, phases, totalSeconds: total });
        }
        const phaseList = Object.entries(phases).map(([name, s]) => `${name} ${s}s`).join(', ');
        say(
          [
            'summary',
            `  orders      ${count(seeded.orders)} (${seeded.seeded ? `seeded in ${phases.seed}s` : 'seeded by an earlier run'})`,
            `  adopted     ${adopted.generation}: ${count(adopted.rows)} rows of public.orders_enriched`,
            `  receipts    ${receipts.receipts}/${receipts.partitions}, ${count(receipts.rowsOut)} rows, conserved sums ${receipts.conservedEqual ? 'equal' : 'DIFFER'}`,
            `  partitions  ${plan.partitions}, coverage ${results.coverageProved ? 'proved' : 'FAILED'}`,
            `  reconciled  ${reconciliation ? `#${reconciliation.id}: ${reconciliation.state}, ${reconciliation.findings.count} findings` : 'by an earlier run'}`,
            `  submitted   by ${logins.operator}; approved by ${approval.principal} (${approval.approvals}/${approval.required}) before the seal, another person`,
            `  logins      planner, workers, projector, reconciler, cutover as ${logins.fleet}; the API as ${logins.api}; none a superuser or the owner`,
            cut
              ? `  cutover     ${cut.from} → ${cut.to}: freeze window ${cut.freezeMs} ms (switch ${cut.casMs} ms); events caught up ${count((cut.rounds?.pre?.events ?? 0) + (cut.rounds?.final?.events ?? 0))} by rounds + ${count(cut.appliedAtSwitch?.events ?? 0)} at the switch; ` +
                `${count((cut.tail?.pre?.keys ?? 0) + (cut.tail?.post?.keys ?? 0))} changed keys re-verified; release ACTIVE`
              : `  cutover     by an earlier run; release ${stateNow}`,
            ...(results.pinnedReader
              ? [`  readers     a report pinned before the cutover read ${count((results.pinnedReader as { rows: number }).rows)} rows, all of ${(results.pinnedReader as { generation: string }).generation}; the view reads ${cut?.to ?? '?'} since the switch`]
              : []),
            `  live        ${count(liveResult.writer.transactions)} writes followed by the projector (${count(liveResult.projector.events)} events, lag p95 ${liveResult.projector.lagP95Ms} ms); view = transform map of the source`,
            `  time        ${phaseList}; total ${total}s`,
          ].join('\n'),
        );
        } finally {
          await live.stop();
          await api?.stop();
          await operator?.end();
          await fleet.end();
          await fleetCtx.close();
        }
      }),
    );
}
