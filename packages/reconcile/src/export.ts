// The NDJSON file of a reconciliation is an export of its stored findings
// (genfill.reconciliation_findings), in `seq` order, one line each in the format findingLine
// defines. The file is written under a temporary name beside its final path and renamed when
// complete, so a file under the final name is always whole. `genfill reconcile` opens the
// export before it reads anything — a path it cannot write is bad input, refused before any
// verdict is recorded — and writes it after the verdict is stored. Without a path of its own
// the CLI writes to .genfill/findings/ under the working directory (beside the demo's files, and
// ignored by git), created when a file is written there and not before.
import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm, rmdir, type FileHandle } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { GenfillError, InvalidInputError, NotFoundError, RefusedError } from '@genfill/contracts';
import type { Db } from '@genfill/registry';
import { findingLine } from './findings.ts';
import { findingsCountOf, storedFindings } from './stored.ts';

/** The reconciliation is stored, but its findings could not be written to the file: export again. */
export class FindingsExportError extends GenfillError {
  readonly exitCode = 1 as const;
  override readonly retryable = true;
  constructor(
    readonly reconciliationId: string,
    readonly path: string,
    cause: unknown,
  ) {
    super(
      `reconciliation #${reconciliationId} is stored with its findings, but they could not be written to ${path} ` +
        `(${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}): they stay in the registry, ` +
        `\`genfill repair <release> --reconciliation ${reconciliationId}\` reads them from there`,
      { cause },
    );
  }
}

/** Where `genfill reconcile` exports findings without --findings-out: `.genfill/findings/` under `cwd`. */
export function defaultFindingsDir(cwd: string): string {
  return resolve(cwd, '.genfill', 'findings');
}

/** `reconcile-<release>-<id>.ndjson` in `dir`. */
export function defaultFindingsPath(dir: string, release: string, id: string): string {
  return resolve(dir, `reconcile-${release}-${id}.ndjson`);
}

export class FindingsExport {
  readonly tempPath: string;
  #handle: FileHandle | undefined;
  /** The directories open() created, deepest first: removed again when no file is written. */
  #created: string[] = [];

  private constructor(readonly dir: string) {
    this.tempPath = join(dir, `.reconcile-${process.pid}-${randomBytes(4).toString('hex')}.ndjson.tmp`);
  }

  /**
   * Open the temporary file in `dir`: a directory that cannot take it fails here, before any
   * work. With `create`, a missing `dir` (and its missing parents) is made first, and removed
   * again by discard() unless a file was written into it.
   */
  static async open(dir: string, option = '--findings-out', o: { create?: boolean } = {}): Promise<FindingsExport> {
    const x = new FindingsExport(dir);
    for (let attempt = 1; ; attempt++) {
      try {
        if (o.create) {
          // mkdir names the first directory it made; those from `dir` up to it are ours.
          const first = await mkdir(dir, { recursive: true });
          for (let d = dir; first !== undefined; d = dirname(d)) {
            x.#created.push(d);
            if (d === first || d === dirname(d)) break;
          }
        }
        x.#handle = await open(x.tempPath, 'wx');
        return x;
      } catch (err) {
        await x.#removeCreated();
        const code = (err as NodeJS.ErrnoException).code;
        // Another export that found nothing to write may have removed the directory in between.
        if (o.create && code === 'ENOENT' && attempt < 3) continue;
        throw new InvalidInputError([{ path: option, message: `cannot write findings in ${dir}: ${code ?? (err as Error).message}` }], { cause: err });
      }
    }
  }

  /** Write every stored finding of the reconciliation, then move the file to `finalPath`. Returns the line count. */
  async write(db: Db, reconciliationId: string, finalPath: string): Promise<number> {
    const handle = this.#handle;
    if (!handle) throw new Error('findings export already closed');
    const expected = await findingsCountOf(db, reconciliationId);
    if (expected === null) {
      await this.discard();
      throw new NotFoundError(`there is no reconciliation #${reconciliationId}`);
    }
    let n = 0;
    try {
      for await (const chunk of storedFindings(db, reconciliationId)) {
        await handle.write(chunk.map(findingLine).join(''));
        n += chunk.length;
      }
      await handle.close();
      this.#handle = undefined;
      if (n !== expected) {
        // Reconciliations stored before migration 0007 kept their findings in a file only.
        throw new RefusedError(`reconciliation #${reconciliationId} counts ${expected} findings but the registry holds ${n}: it predates stored findings`);
      }
      await rename(this.tempPath, finalPath);
      if (dirname(finalPath) === this.dir) this.#created = [];
    } catch (err) {
      await this.discard();
      throw err instanceof GenfillError ? err : new FindingsExportError(reconciliationId, finalPath, err);
    }
    return n;
  }

  async discard(): Promise<void> {
    await this.#handle?.close().catch(() => undefined);
    this.#handle = undefined;
    await rm(this.tempPath, { force: true });
    await this.#removeCreated();
  }

  /** Only empty ones: another export may have written into the same directory meanwhile. */
  async #removeCreated(): Promise<void> {
    for (const d of this.#created) await rmdir(d).catch(() => undefined);
    this.#created = [];
  }
}

/**
 * Write the stored findings of reconciliation `reconciliationId` to `file` as NDJSON (an
 * empty file when it has none). Returns the absolute path and the number of lines. With
 * `createDir`, a missing directory of `file` is made (the default directory); otherwise it must
 * exist (a path someone typed).
 */
export async function exportFindings(db: Db, reconciliationId: string, file: string, o: { createDir?: boolean } = {}): Promise<{ path: string; count: number }> {
  const path = resolve(file);
  const x = await FindingsExport.open(dirname(path), '--findings-out', { create: o.createDir === true });
  const count = await x.write(db, reconciliationId, path);
  return { path, count };
}
