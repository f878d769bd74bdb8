// Name lists the static check matches against. They describe PostgreSQL's built-ins; user
// functions are judged by the database probe instead (pg_proc.provolatile), which also sees
// volatile built-ins missing from these lists.

/** Built-in aggregates (unqualified or pg_catalog). Any FuncCall with FILTER, DISTINCT,
 *  ORDER BY inside the call, WITHIN GROUP or `*` is an aggregate whatever its name. */
export const AGGREGATES: ReadonlySet<string> = new Set([
  'count', 'sum', 'avg', 'min', 'max', 'any_value',
  'array_agg', 'string_agg', 'json_agg', 'jsonb_agg', 'json_agg_strict', 'jsonb_agg_strict',
  'json_object_agg', 'jsonb_object_agg', 'json_object_agg_strict', 'jsonb_object_agg_strict',
  'json_object_agg_unique', 'jsonb_object_agg_unique',
  'json_object_agg_unique_strict', 'jsonb_object_agg_unique_strict',
  'xmlagg', 'range_agg', 'range_intersect_agg',
  'bool_and', 'bool_or', 'every', 'bit_and', 'bit_or', 'bit_xor',
  'stddev', 'stddev_pop', 'stddev_samp', 'variance', 'var_pop', 'var_samp',
  'corr', 'covar_pop', 'covar_samp',
  'regr_avgx', 'regr_avgy', 'regr_count', 'regr_intercept', 'regr_r2',
  'regr_slope', 'regr_sxx', 'regr_sxy', 'regr_syy',
  'percentile_cont', 'percentile_disc', 'mode',
  // Hypothetical-set aggregates share names with window functions.
  'rank', 'dense_rank', 'percent_rank', 'cume_dist',
]);

/** Functions whose result changes between calls or sessions, with the reason to show. */
export const FORBIDDEN_FUNCTIONS: ReadonlyMap<string, string> = new Map([
  ...['now', 'clock_timestamp', 'statement_timestamp', 'transaction_timestamp', 'timeofday'].map(
    (n) => [n, 'reads the clock'] as const,
  ),
  ...['random', 'random_normal', 'setseed', 'gen_random_uuid', 'uuid_generate_v1',
    'uuid_generate_v1mc', 'uuid_generate_v4', 'uuidv4', 'uuidv7'].map(
    (n) => [n, 'returns a different value on every call'] as const,
  ),
  ...['nextval', 'setval', 'currval', 'lastval'].map((n) => [n, 'reads or advances a sequence'] as const),
  ...['txid_current', 'txid_current_if_assigned', 'pg_current_xact_id',
    'pg_current_xact_id_if_assigned'].map((n) => [n, 'reads the current transaction id'] as const),
]);

/** SQLValueFunction op → the SQL spelling and why it is refused. */
export function describeValueFunction(op: string): { sql: string; reason: string } {
  const sql = op.replace(/^SVFOP_/, '').replace(/_N$/, '');
  const clock = /DATE|TIME/.test(sql);
  return {
    sql,
    reason: clock ? 'reads the clock' : 'depends on the session that runs it (role, database, search_path)',
  };
}

/** String literals the date/time input functions turn into the current time. */
export const CLOCK_LITERALS: ReadonlySet<string> = new Set(['now', 'today', 'tomorrow', 'yesterday']);
export const DATETIME_TYPES: ReadonlySet<string> = new Set([
  'date', 'time', 'timetz', 'timestamp', 'timestamptz',
]);

export const STATEMENT_KINDS: Readonly<Record<string, string>> = {
  InsertStmt: 'an INSERT',
  UpdateStmt: 'an UPDATE',
  DeleteStmt: 'a DELETE',
  MergeStmt: 'a MERGE',
  CreateStmt: 'a CREATE TABLE',
  CreateTableAsStmt: 'a CREATE TABLE AS',
  ViewStmt: 'a CREATE VIEW',
  DropStmt: 'a DROP',
  TruncateStmt: 'a TRUNCATE',
  AlterTableStmt: 'an ALTER TABLE',
  CopyStmt: 'a COPY',
  ExplainStmt: 'an EXPLAIN',
  CallStmt: 'a CALL',
  DoStmt: 'a DO',
  TransactionStmt: 'a transaction control',
  VariableSetStmt: 'a SET',
};

export function statementKind(nodeType: string): string {
  return STATEMENT_KINDS[nodeType] ?? `a ${nodeType.replace(/Stmt$/, '')}`;
}
