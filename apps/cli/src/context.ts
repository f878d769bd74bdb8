// Per-invocation wiring: configuration parsed once, one pool, the schema check.
import { loadConfig, type Config } from '@genfill/contracts';
import { assertSchemaCurrent, createPool, type Db } from '@genfill/registry';
import type { Io } from './io.ts';

export class Context {
  #config: Config | undefined;
  #db: Db | undefined;
  constructor(readonly io: Io) {}

  get config(): Config {
    this.#config ??= loadConfig(this.io.env);
    return this.#config;
  }

  /**
   * The registry pool, without the schema check (for `migrate`). The first call decides its
   * shape: a service verb (worker, planner) asks for a `fleet` pool with lock and
   * idle-in-transaction timeouts.
   */
  rawDb(opts: { fleet?: boolean; name?: string; max?: number } = {}): Db {
    this.#db ??= createPool(this.config, opts.name ?? 'genfill-cli', opts.max ?? 4, { fleet: opts.fleet });
    return this.#db;
  }

  /** The registry pool after checking the schema is exactly the version this code knows. */
  async db(opts: { fleet?: boolean; name?: string; max?: number } = {}): Promise<Db> {
    const db = this.rawDb(opts);
    await assertSchemaCurrent(db);
    return db;
  }

  async close(): Promise<void> {
    await this.#db?.end();
  }
}
