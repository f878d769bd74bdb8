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

  /** The registry pool, without the schema check (for `migrate`). */
  rawDb(): Db {
    this.#db ??= createPool(this.config, 'genfill-cli');
    return this.#db;
  }

  /** The registry pool after checking the schema is exactly the version this code knows. */
  async db(): Promise<Db> {
    const db = this.rawDb();
    await assertSchemaCurrent(db);
    return db;
  }

  async close(): Promise<void> {
    await this.#db?.end();
  }
}
