// One controller candidate per release in every worker process; the Redis lease elects the
// one that decides. A tick of the holder: read the signals, decide (AIMD), write the decision
// under the Postgres fence, apply the concurrency knob, then renew the lease. The decision is
// written before the renewal on purpose: a holder that stalled (SIGSTOP, GC) and wakes up
// acts on its stale belief, and the fence — not the belief — makes that write land nowhere.
import type { Logger } from '@genfill/observability';
import { releaseQueue, type BuildQueue, type Redis } from '@genfill/queue';
import type { Db } from '@genfill/registry';
import { budgetOf, Pacer } from './aimd.ts';
import { knobsOf, latestDecision, recordDecision, releaseThrottleState, takeFence } from './decisions.ts';
import { leaseKey, RedisLease } from './lease.ts';
import type { ThrottleMetrics } from './metrics.ts';
import { fleetThroughput, type Signal } from './signals.ts';

export interface ControllerOptions {
  db: Db;
  redis: Redis;
  prefix: string;
  release: string;
  /** This candidate's identity (worker id plus a random suffix): the lease value and `holder`. */
  holder: string;
  log: Logger;
  intervalMs: number;
  /** Redis lease length; a successor takes over within one lease after the holder dies. */
  leaseMs: number;
  /**
   * The signals' window. After a decrease, further decreases wait this long, and after any
   * step an increase does (a pause or resume never waits): the windows need this long to show
   * the effect of the last step — TCP moves once per round trip. What the fleet built is
   * measured over the same window.
   */
  windowMs: number;
  /** The signals the holder reads, made when it takes the lease and closed when it loses it. */
  signals: () => Signal[];
  metrics?: ThrottleMetrics;
}

export type Role = 'candidate' | 'leader';

export class ReleaseController {
  readonly #o: ControllerOptions;
  readonly #lease: RedisLease;
  readonly #queue: BuildQueue;
  readonly #log: Logger;
  #role: Role = 'candidate';
  #token = 0;
  /** The knobs in force and the pacing of steps; null while not the leader. */
  #pacer: Pacer | null = null;
  #signals: Signal[] = [];
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | null = null;
  #stopped = false;

  constructor(o: ControllerOptions) {
    this.#o = o;
    this.#lease = new RedisLease(o.redis, leaseKey(o.prefix, o.release), o.holder, o.leaseMs);
    this.#queue = releaseQueue(o.release, { connection: o.redis, prefix: o.prefix });
    this.#log = o.log.child({ release: o.release, scope: 'throttle', holder: o.holder });
  }

  get role(): Role {
    return this.#role;
  }

  start(): void {
    const loop = () => {
      if (this.#stopped) return;
      this.#running = this.tick()
        .catch((err) => this.#log.warn({ err: (err as Error).message }, 'throttle tick failed; trying again next interval'))
        .finally(() => {
          this.#running = null;
          if (!this.#stopped) this.#timer = setTimeout(loop, this.#o.intervalMs);
        });
    };
    loop();
  }

  async tick(): Promise<void> {
    const o = this.#o;
    const st = await releaseThrottleState(o.db, o.release);
    if (!st || st.state !== 'BUILDING') {
      if (this.#role === 'leader') await this.#lease.release().catch(() => undefined);
      return void (await this.#stepDown('the release is no longer BUILDING'));
    }
    if (this.#role === 'candidate') {
      if (!(await this.#lease.acquire())) return;
      this.#token = await takeFence(o.db, o.release, o.holder);
      const last = await latestDecision(o.db, o.release);
      this.#pacer = new Pacer(o.windowMs, last ? knobsOf(last) : null);
      this.#signals = o.signals();
      this.#role = 'leader';
      o.metrics?.leader(o.release, true);
      this.#log.info({ token: this.#token }, 'took the throttle lease; deciding for the release');
    }

    const readings = await Promise.all(this.#signals.map((s) => s.read()));
    const liveWorkers = await this.#liveWorkers();
    // What the fleet built over one step's window decides whether concurrency is wanted.
    const built = { rowsPerSecond: await fleetThroughput(o.db, o.release, o.windowMs), windowMs: o.windowMs };
    const pacer = this.#pacer!;
    const now = Date.now();
    const decision = pacer.propose(st.budget, readings, { builtRowsPerSecond: built.rowsPerSecond, liveWorkers }, now, st.throttlePaused);
    const workerRowsPerSecond = decision.rowsPerSecond / liveWorkers;
    const res = await recordDecision(o.db, { release: o.release, token: this.#token, holder: o.holder, decision, readings, liveWorkers, workerRowsPerSecond, built });
    if (res.kind === 'fenced') {
      // Zero rows: a successor bumped the token while we were not looking. Nothing landed.
      o.metrics?.fenced(o.release);
      this.#log.warn({ token: this.#token, currentToken: res.currentToken, currentHolder: res.currentHolder }, 'throttle decision refused by the fence: another controller took over; nothing was written');
      return void (await this.#stepDown('fenced'));
    }
    pacer.accept(decision, now);
    // Redis after Postgres: the registry row is the decision; the queue setting follows it
    // and is re-applied every tick, so a successor overwrites anything a stale holder set.
    await this.#queue.setGlobalConcurrency(decision.concurrency);
    const ratios = Object.fromEntries(readings.filter((r) => r.value !== null).map((r) => [r.name, r.value! / budgetOf(r.name, st.budget)]));
    o.metrics?.decision(o.release, decision, ratios, workerRowsPerSecond);
    const line = { decision: res.id, token: this.#token, action: decision.action, binding: decision.binding, ratio: decision.ratio, concurrency: decision.concurrency, rowsPerSecond: Math.round(decision.rowsPerSecond), liveWorkers, builtRowsPerSecond: Math.round(built.rowsPerSecond), throttlePaused: decision.paused, signals: Object.fromEntries(readings.map((r) => [r.name, r.value])) };
    if (decision.action === 'hold' || decision.action === 'increase') this.#log.debug(line, 'throttle decision');
    else this.#log.info(line, 'throttle decision');

    if (!(await this.#lease.renew())) {
      this.#log.warn({ token: this.#token }, 'lost the throttle lease; no longer deciding');
      await this.#stepDown('lease lost');
    }
  }

  /** Workers connected to the release's queue (BullMQ names their connections); at least 1. */
  async #liveWorkers(): Promise<number> {
    try {
      return Math.max(1, (await this.#queue.getWorkers()).length);
    } catch {
      return 1;
    }
  }

  async #stepDown(why: string): Promise<void> {
    if (this.#role !== 'leader') return;
    this.#role = 'candidate';
    this.#o.metrics?.leader(this.#o.release, false);
    const signals = this.#signals;
    this.#signals = [];
    this.#pacer = null;
    await Promise.all(signals.map((s) => s.close().catch(() => undefined)));
    this.#log.info({ why }, 'stepped down as throttle controller');
  }

  async close(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
    if (this.#role === 'leader') await this.#lease.release().catch(() => undefined);
    await this.#stepDown('closing');
    await this.#queue.close().catch(() => undefined);
  }
}
