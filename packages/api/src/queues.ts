// The release queues the API shows in Bull Board and measures on /metrics: one per release in
// the registry that is not CANCELLED or RETIRED (a cancelled release's queue was removed with
// its jobs). Re-read from the registry on each use, so a release planned a second ago is there.
import type { ReleaseState } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import { releaseQueue, withDeadline, type BuildQueue, type Redis } from '@genfill/queue';
import type { Db } from '@genfill/registry';

export interface ShownRelease {
  release: string;
  state: ReleaseState;
  queue: BuildQueue;
}

export class ReleaseQueues {
  readonly #shown = new Map<string, ShownRelease>();
  #refreshing: Promise<ShownRelease[]> | undefined;
  #listeners: ((shown: ShownRelease[]) => void)[] = [];

  constructor(
    private readonly db: Db,
    private readonly redis: Redis,
    readonly prefix: string,
    private readonly log: Logger,
  ) {}

  /** Called with the new list whenever a refresh adds or drops a release. */
  onChange(fn: (shown: ShownRelease[]) => void): void {
    this.#listeners.push(fn);
  }

  list(): ShownRelease[] {
    return [...this.#shown.values()];
  }

  /** The release behind a Bull Board queue name (`release.<id>`), if it is shown. */
  byQueueName(name: string): ShownRelease | undefined {
    return this.list().find((s) => s.queue.name === name);
  }

  /** Concurrent callers share one registry read. */
  refresh(): Promise<ShownRelease[]> {
    this.#refreshing ??= this.#refresh().finally(() => (this.#refreshing = undefined));
    return this.#refreshing;
  }

  async #refresh(): Promise<ShownRelease[]> {
    const { rows } = await this.db.query<{ id: string; state: ReleaseState }>(
      `SELECT id, state FROM genfill.releases WHERE state NOT IN ('CANCELLED', 'RETIRED') ORDER BY submitted_at, id`,
    );
    const keep = new Set(rows.map((r) => r.id));
    let changed = false;
    for (const [id, shown] of this.#shown) {
      if (keep.has(id)) continue;
      this.#shown.delete(id);
      changed = true;
      await shown.queue.close().catch((err: Error) => this.log.warn({ release: id, err: err.message }, 'closing a queue failed'));
    }
    for (const r of rows) {
      const shown = this.#shown.get(r.id);
      if (shown) {
        shown.state = r.state;
        continue;
      }
      this.#shown.set(r.id, { release: r.id, state: r.state, queue: releaseQueue(r.id, { connection: this.redis, prefix: this.prefix }) });
      changed = true;
    }
    const list = this.list();
    if (changed) for (const fn of this.#listeners) fn(list);
    return list;
  }

  /** Drop a release at once (it was just cancelled), before its queue is removed. */
  async forget(release: string): Promise<void> {
    const shown = this.#shown.get(release);
    if (!shown) return;
    this.#shown.delete(release);
    for (const fn of this.#listeners) fn(this.list());
    // A new Queue writes its meta hash asynchronously; waiting for it keeps that write from
    // landing after the queue is obliterated. Bounded: BullMQ waits for a dead Redis forever.
    await withDeadline(shown.queue.getVersion(), 2_000, 'queue meta').catch(() => null);
    await shown.queue.close().catch(() => undefined);
  }

  async close(): Promise<void> {
    const all = this.list();
    this.#shown.clear();
    await Promise.all(all.map((s) => s.queue.close().catch(() => undefined)));
  }
}
