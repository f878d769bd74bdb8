// Findings: every mismatch, complete — never a sample. Their record is the registry
// (genfill.reconciliation_findings, migration 0007), inserted in the transaction that stores
// the verdict; the NDJSON file is an export of those rows (export.ts).
//
// While the checks run, a damaged candidate can produce millions of findings, more than is
// wise to hold in memory until the verdict: the writer counts them and spools them to a
// temporary file (one JSON array a line, the key kept as PostgreSQL's JSON text so bigints keep
// every digit), which the store reads back in chunks and removes. The spool is a buffer, never
// evidence: a failed run leaves nothing.
//
// Every NDJSON line: {"partition", "key", "kind", "check", "column"?, "detail"?}
//   partition  the partition id the finding is in, null for release-wide ones
//   key        {column: value} of the business key (PostgreSQL's JSON of the values, so
//              bigints keep every digit), null for a partition- or release-wide finding
//   kind       see FindingKind; `check` says which comparison found it
//   column     the column that differs, for value / unexpected_diff / conserved findings
// `genfill repair --findings <file>` or `--reconciliation <id>` rebuilds the partitions named.
import { createReadStream } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { open, rm, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

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
  /** Parsed for display; the registry and the NDJSON keep PostgreSQL's JSON text. */
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

/** One finding as the registry stores it: the columns of genfill.reconciliation_findings. */
export interface FindingRow {
  partition: string | null;
  kind: FindingKind;
  check: FindingCheck;
  column: string | null;
  keyJson: string | null;
  /** The detail object as JSON text, or null. */
  detailJson: string | null;
}

/** The NDJSON line of a finding (with its newline): the one definition of the file format. */
export function findingLine(f: FindingRow): string {
  return (
    `{"partition":${JSON.stringify(f.partition)},"key":${f.keyJson ?? 'null'},"kind":${JSON.stringify(f.kind)},` +
    `"check":${JSON.stringify(f.check)}` +
    (f.column !== null ? `,"column":${JSON.stringify(f.column)}` : '') +
    (f.detailJson !== null ? `,"detail":${f.detailJson}` : '') +
    '}\n'
  );
}

const FLUSH_BYTES = 1 << 16;

type SpoolLine = [string | null, string | null, FindingKind, FindingCheck, string | null, string | null];

export class FindingsWriter {
  readonly spoolPath: string;
  #handle: FileHandle | undefined;
  #buffer: string[] = [];
  #bytes = 0;
  #count = 0;
  readonly byKind: Partial<Record<FindingKind, number>> = {};
  readonly byPartition = new Map<string, number>();
  readonly first: Finding[] = [];

  private constructor(private readonly keepFirst: number) {
    this.spoolPath = join(tmpdir(), `genfill-findings-${process.pid}-${randomBytes(4).toString('hex')}.spool`);
  }

  static async create(keepFirst = 20): Promise<FindingsWriter> {
    const w = new FindingsWriter(keepFirst);
    w.#handle = await open(w.spoolPath, 'wx', 0o600);
    return w;
  }

  get count(): number {
    return this.#count;
  }

  add(f: FindingInput): void {
    const { keyJson, ...rest } = f;
    const line: SpoolLine = [rest.partition, keyJson, rest.kind, rest.check, rest.column ?? null, rest.detail === undefined ? null : JSON.stringify(rest.detail)];
    const text = JSON.stringify(line) + '\n';
    this.#buffer.push(text);
    this.#bytes += text.length;
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

  /** Every finding in the order it was added, `size` at a time (the spool is read back from disk). */
  async *chunks(size: number): AsyncGenerator<FindingRow[]> {
    await this.drain(true);
    const lines = createInterface({ input: createReadStream(this.spoolPath, { encoding: 'utf8' }), crlfDelay: Infinity });
    let batch: FindingRow[] = [];
    for await (const text of lines) {
      if (text === '') continue;
      const [partition, keyJson, kind, check, column, detailJson] = JSON.parse(text) as SpoolLine;
      batch.push({ partition, keyJson, kind, check, column, detailJson });
      if (batch.length >= size) {
        yield batch;
        batch = [];
      }
    }
    if (batch.length > 0) yield batch;
  }

  /** Close and remove the spool; the findings are in the registry (or the run failed). */
  async close(): Promise<void> {
    await this.#handle?.close().catch(() => undefined);
    this.#handle = undefined;
    await rm(this.spoolPath, { force: true });
  }
}

export function describeFinding(f: Finding): string {
  const key = f.key ? ` ${JSON.stringify(f.key)}` : '';
  const column = f.column ? ` column ${f.column}` : '';
  const detail = f.detail ? ` ${JSON.stringify(f.detail)}` : '';
  return `${f.kind.padEnd(18)} ${f.partition ?? '-'}${key}${column} (${f.check})${detail}`;
}
