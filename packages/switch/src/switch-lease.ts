// The lease a pointer switch runs under — a cutover or a rollback (migrations 0015, 0017): one
// RUNNING row of genfill.cutovers per dataset, renewed while its holder runs; each step recorded
// on it (fenced on the holder: a holder that lost the lease stops at its next step); taken over
// by the next holder once it expires, which then finishes or undoes the switch. The renewal
// pauses around the switch transaction, which updates the same row and must not find it
// changed under its snapshot.
import { setTimeout as sleep } from 'node:timers/promises';
import { pgErrorCode, RefusedError, SQLSTATE, type SwitchKind } from '@genfill/contracts';
import type { Db } from '@genfill/registry';


/** Raised at a step once another holder took the lease over: this holder stops, undoing nothing. */
export class LeaseLost extends RefusedError {}

export interface SwitchStepTime<S extends string = string> {
  step: S;
  ms: number;
  holder: string;
}

export interface LeaseOptions {
  kind: SwitchKind;
  release: string;
  dataset: string;
  from: string;
  to: string;
  holder: string;
  leaseMs: number;
  maxFreezeMs: number;
  request: string | null;
}

const since = (t: number) => Math.round((performance.now() - t) * 10) / 10;

export class SwitchLease<S extends string = string> {
  readonly steps: SwitchStepTime<S>[] = [];
  private lost = false;
  private paused = false;
  private renewing: Promise<unknown> = Promise.resolve();
  private stepAt = performance.now();
  private timer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly db: Db,
    readonly id: string,
    readonly holder: string,
    readonly kind: SwitchKind,
    readonly release: string,
    readonly maxFreezeMs: number,
    /** Taken over from a holder that died. */
    readonly recovered: boolean,
    private readonly leaseMs: number,
    private readonly onStep?: (step: S) => void | Promise<void>,
  ) {}

  /**
   * The running switch of this release and kind, taken over once its lease has run out (waiting
   * for that when it is about to), or null when there is none. Refused while another release's
   * switch runs on the dataset.
   */
  static async recover<S extends string>(db: Db, o: LeaseOptions, onStep?: (step: S) => void | Promise<void>, waitedMs = 0): Promise<SwitchLease<S> | null> {
    const { rows: taken } = await db.query<{ id: string; max_freeze_ms: number }>(
      `UPDATE genfill.cutovers c SET holder = $3, lease_expires_at = clock_timestamp() + $4 * interval '1 millisecond',
              recovered_by = c.recovered_by || $3
        WHERE c.release = $1 AND c.kind = $2 AND c.state = 'RUNNING' AND (c.lease_expires_at < clock_timestamp() OR c.holder = $3)
       RETURNING c.id::text, c.max_freeze_ms`,
      [o.release, o.kind, o.holder, o.leaseMs],
    );
    if (taken[0]) return new SwitchLease<S>(db, taken[0].id, o.holder, o.kind, o.release, taken[0].max_freeze_ms, true, o.leaseMs, onStep).renew();
    const { rows: running } = await db.query<{ id: string; release: string; kind: string; holder: string; left_ms: number }>(
      `SELECT id::text, release, kind, holder, round(extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::int AS left_ms
         FROM genfill.cutovers WHERE dataset = $1 AND state = 'RUNNING'`,
      [o.dataset],
    );
    const r = running[0];
    if (r && r.release === o.release && r.kind === o.kind && waitedMs < o.leaseMs * 2) {
      // This release's switch under a lease that has not run out yet: its holder died (a
      // request taken again) or is finishing — wait for the lease, then finish or undo it.
      const pause = Math.min(Math.max(50, r.left_ms + 50), 1000);
      await sleep(pause);
      return SwitchLease.recover<S>(db, o, onStep, waitedMs + pause);
    }
    if (r) {
      throw new RefusedError(
        `${r.kind} #${r.id} of ${r.release} is running on ${r.holder} (its lease has ${Math.max(0, r.left_ms)} ms left): one cutover or rollback per dataset at a time`,
      );
    }
    return null;
  }

  /** A new switch record under this holder's lease. */
  static async start<S extends string>(db: Db, o: LeaseOptions, onStep?: (step: S) => void | Promise<void>): Promise<SwitchLease<S>> {
    try {
      const { rows } = await db.query<{ id: string }>(
        `INSERT INTO genfill.cutovers (kind, release, dataset, from_generation, to_generation, request, holder, lease_expires_at, max_freeze_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp() + $8 * interval '1 millisecond', $9) RETURNING id::text`,
        [o.kind, o.release, o.dataset, o.from, o.to, o.request, o.holder, o.leaseMs, o.maxFreezeMs],
      );
      return new SwitchLease<S>(db, rows[0]!.id, o.holder, o.kind, o.release, o.maxFreezeMs, false, o.leaseMs, onStep).renew();
    } catch (err) {
      if (pgErrorCode(err) === SQLSTATE.uniqueViolation) throw new RefusedError(`another cutover or rollback of dataset ${o.dataset} started meanwhile: one at a time`);
      throw err;
    }
  }

  private renew(): this {
    this.timer = setInterval(() => {
      if (this.paused) return;
      this.renewing = this.db
        .query(`UPDATE genfill.cutovers SET lease_expires_at = clock_timestamp() + $3 * interval '1 millisecond' WHERE id = $1 AND holder = $2 AND state = 'RUNNING'`, [
          this.id,
          this.holder,
          this.leaseMs,
        ])
        .then((x) => {
          if (x.rowCount !== 1) this.lost = true;
        })
        .catch(() => undefined);
    }, Math.max(200, Math.floor(this.leaseMs / 3)));
    return this;
  }

  /** Stop renewing for the switch transaction (which updates the row itself). */
  async pause(): Promise<void> {
    this.paused = true;
    await this.renewing;
  }

  resume(): void {
    this.paused = false;
  }

  /** Record a step and its time (since the previous one); fenced on the holder. */
  async record(step: S, fields: Record<string, unknown> = {}): Promise<void> {
    const ms = since(this.stepAt);
    this.stepAt = performance.now();
    this.steps.push({ step, ms, holder: this.holder });
    const sets = Object.keys(fields).map((k, i) => `, ${k} = $${i + 5}`);
    const res = await this.db.query(
      `UPDATE genfill.cutovers SET step = $3, steps = steps || $4::jsonb${sets.join('')} WHERE id = $1 AND holder = $2 AND state = 'RUNNING'`,
      [this.id, this.holder, step, JSON.stringify([{ step, ms, holder: this.holder, at: new Date().toISOString() }]), ...Object.values(fields)],
    );
    if (res.rowCount !== 1 || this.lost) {
      throw new LeaseLost(`${this.kind} #${this.id} of ${this.release}: the lease was lost (taken over by another holder); this holder stops`);
    }
    await this.onStep?.(step);
  }

  /** The outcome, recorded once (fenced on the holder). */
  async finish(state: 'DONE' | 'ABORTED', outcome: unknown, fields: Record<string, unknown> = {}): Promise<void> {
    const sets = Object.keys(fields).map((k, i) => `, ${k} = $${i + 5}`);
    await this.db.query(
      `UPDATE genfill.cutovers SET state = $3, outcome = $4::jsonb, finished_at = clock_timestamp()${sets.join('')} WHERE id = $1 AND holder = $2 AND state = 'RUNNING'`,
      [this.id, this.holder, state, JSON.stringify(outcome), ...Object.values(fields)],
    );
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.renewing;
  }
}
