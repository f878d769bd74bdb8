// Findings: every mismatch, one JSON object per line (NDJSON), complete — never a sample.
// The file is written as the checks run (a damaged candidate can have millions of them) to a
// temporary name beside its final path, and renamed in the transaction that stores the
// verdict, so a stored reconciliation always has its whole file and a failed run leaves none.
//
// Every line: {"partition", "key", "kind", "check", "column"?, "detail"?}
//   partition  the partition id the finding is in, null for release-wide ones
//   key        {column: value} of the business key (PostgreSQL's JSON of the values, so
//              bigints keep every digit), null for a partition- or release-wide finding
//   kind       see FindingKind; `check` says which comparison found it
//   column     the column that differs, for value / unexpected_diff / conserved findings
// `genfill repair --findings <file>` rebuilds the partitions named by the lines.
import { randomBytes } from 'node:crypto';
import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';

export const KEY_KINDS = ['missing', 'extra', 'value', 'duplicate', 'unexpected_diff', 'tombstone', 'conserved', 'null_time'] as const;
export const PARTITION_KINDS = [
  'coverage',
  'partition_status',
  'receipt_missing',
  'receipt_ambiguous',
  'receipt_digest',
  'receipt_mismatch',
  'dual_mismatch',
  'conserved_sum',
  'dependency_changed',
  'outside_partitions',
] as const;
export type FindingKind = (typeof KEY_KINDS)[number] | (typeof PARTITION_KINDS)[number];

/** Which comparison found it. */
export type FindingCheck = 'manifest' | 'receipt' | 'dual_compute' | 'old_generation' | 'conserved' | 'candidate' | 'dependency';

export interface Finding {
  partition: string | null;
  /** Parsed for display; the file keeps PostgreSQL's JSON text. */
  key: Record<string, unknown> | null;
  kind: FindingKind;
  check: FindingCheck;
  column?: string;
  detail?: Record<string, unknown>;
}

export interface FindingInput extends Omit<Finding, 'key'> {
  /** The key as JSON text (from jsonb_build_object(...)::text), or null. */
  keyJson: string | null;
}

const FLUSH_BYTES = 1 << 16;

export class FindingsWriter {
  readonly tempPath: string;
  #handle: FileHandle | undefined;
  #buffer: string[] = [];
  #bytes = 0;
  #count = 0;
  readonly byKind: Partial<Record<FindingKind, number>> = {};
  readonly byPartition = new Map<string, number>();
  readonly first: Finding[] = [];

  private constructor(
    readonly dir: string,
    private readonly keepFirst: number,
  ) {
    this.tempPath = join(dir, `.reconcile-${process.pid}-${randomBytes(4).toString('hex')}.ndjson.tmp`);
  }

  static async create(dir: string, keepFirst = 20): Promise<FindingsWriter> {
    const w = new FindingsWriter(dir, keepFirst);
    w.#handle = await open(w.tempPath, 'wx');
    return w;
  }

  get count(): number {
    return this.#count;
  }

  add(f: FindingInput): void {
    const { keyJson, ...rest } = f;
    const line =
      `{"partition":${JSON.stringify(rest.partition)},"key":${keyJson ?? 'null'},"kind":${JSON.stringify(rest.kind)},` +
      `"check":${JSON.stringify(rest.check)}` +
      (rest.column !== undefined ? `,"column":${JSON.stringify(rest.column)}` : '') +
      (rest.detail !== undefined ? `,"detail":${JSON.stringify(rest.detail)}` : '') +
      '}\n';
    this.#buffer.push(line);
    this.#bytes += line.length;
    this.#count++;
    this.byKind[rest.kind] = (this.byKind[rest.kind] ?? 0) + 1;
    if (rest.partition !== null) this.byPartition.set(rest.partition, (this.byPartition.get(rest.partition) ?? 0) + 1);
    if (this.first.length < this.keepFirst) this.first.push({ ...rest, key: keyJson === null ? null : (JSON.parse(keyJson) as Record<string, unknown>) });
  }

  /** Write what is buffered once it is big enough; producers await this between batches. */
  async drain(force = false): Promise<void> {
    if (!this.#handle || (!force && this.#bytes < FLUSH_BYTES) || this.#buffer.length === 0) return;
    const chunk = this.#buffer.join('');
    this.#buffer = [];
    this.#bytes = 0;
    await this.#handle.write(chunk);
  }

  /** Flush, close and move the file to its final name. */
  async commit(finalPath: string): Promise<void> {
    await this.drain(true);
    await this.#handle?.close();
    this.#handle = undefined;
    await rename(this.tempPath, finalPath);
  }

  async discard(): Promise<void> {
    await this.#handle?.close().catch(() => undefined);
    this.#handle = undefined;
    await rm(this.tempPath, { force: true });
  }
}

/** `./reconcile-<release>-<id>.ndjson` in `dir`. */
export function defaultFindingsPath(dir: string, release: string, id: string): string {
  return join(dir, `reconcile-${release}-${id}.ndjson`);
}

export function findingsDirOf(path: string): string {
  return dirname(path) || '.';
}

export function describeFinding(f: Finding): string {
  const key = f.key ? ` ${JSON.stringify(f.key)}` : '';
  const column = f.column ? ` column ${f.column}` : '';
  const detail = f.detail ? ` ${JSON.stringify(f.detail)}` : '';
  return `${f.kind.padEnd(18)} ${f.partition ?? '-'}${key}${column} (${f.check})${detail}`;
}
