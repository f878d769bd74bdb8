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

// Built-ins a transform may not call even when STABLE or IMMUTABLE: they run SQL of their own
// (which the relation rule cannot see: `table_to_xml('secret'::regclass, …)` reads a table the
// view's dependencies never name), read files or large objects, or read server and catalog
// state (settings, other sessions, privileges, definitions). Functions in a view or statement
// run with the caller's rights — the service's — so each of these would let a transform read
// what its submitter cannot. Listed from pg_proc on PostgreSQL 15; the probe matches them in
// pg_catalog by name (the static check by name wherever written), every overload included.
const DENIED_NAMES: Readonly<Record<string, string>> = {
  ...Object.fromEntries(
    ['query_to_xml', 'query_to_xml_and_xmlschema', 'query_to_xmlschema', 'table_to_xml', 'table_to_xml_and_xmlschema',
      'table_to_xmlschema', 'schema_to_xml', 'schema_to_xml_and_xmlschema', 'schema_to_xmlschema', 'database_to_xml',
      'database_to_xml_and_xmlschema', 'database_to_xmlschema', 'cursor_to_xml', 'cursor_to_xmlschema', 'ts_stat'].map(
      (n) => [n, 'runs a query of its own'],
    ),
  ),
  ...Object.fromEntries(
    ['pg_read_file', 'pg_read_binary_file', 'pg_read_file_old', 'pg_stat_file', 'pg_current_logfile', 'loread', 'lowrite'].map(
      (n) => [n, 'reads server files or large objects'],
    ),
  ),
  ...Object.fromEntries(
    ['current_setting', 'set_config', 'pg_show_all_settings', 'pg_show_all_file_settings', 'pg_settings_get_flags', 'pg_config',
      'pg_hba_file_rules', 'pg_ident_file_mappings', 'pg_conf_load_time', 'pg_postmaster_start_time', 'pg_backend_pid',
      'inet_client_addr', 'inet_client_port', 'inet_server_addr', 'inet_server_port', 'pg_relation_filepath',
      'pg_tablespace_location', 'pg_has_role', 'pg_current_snapshot', 'txid_current_snapshot', 'version',
      'pg_relation_size', 'pg_table_size', 'pg_indexes_size', 'pg_total_relation_size', 'pg_database_size',
      'pg_tablespace_size', 'pg_filenode_relation', 'pg_options_to_table'].map((n) => [n, 'reads server or catalog state']),
  ),
};
/** Name prefixes of the same families (pg_stat_get_*, pg_ls_*, lo_*, has_*_privilege, …). */
const DENIED_PREFIXES: readonly [string, string][] = [
  ['pg_stat_', 'reads server or catalog state'],
  ['pg_ls_', 'reads server files or large objects'],
  ['pg_read_', 'reads server files or large objects'],
  ['lo_', 'reads server files or large objects'],
  ['pg_get_', 'reads server or catalog state'],
  ['pg_control_', 'reads server or catalog state'],
  ['has_', 'reads server or catalog state'],
  ['dblink', 'runs a query of its own'],
];

/** Why a built-in of this name may not be called by a transform, or null. */
export function deniedBuiltin(name: string): string | null {
  const base = name.toLowerCase();
  const direct = DENIED_NAMES[base];
  if (direct) return direct;
  if (base.startsWith('has_') && !base.endsWith('_privilege')) return null;
  return DENIED_PREFIXES.find(([prefix]) => base.startsWith(prefix))?.[1] ?? null;
}

export const ALLOW_LIST = 'genfill.transform_functions';
