// What `release validate` can tell from the transform's text alone, before any database is
// involved: it is one plain SELECT over `source`, row-local (no aggregation, windows, limits
// or self-joins over source), and deterministic (no clock, randomness or sequences). The
// database probe (probe.ts) then judges what names alone cannot: user functions' volatility,
// which relations are read, and the output's columns.
import type { Problem } from '@genfill/contracts';
import { hasSqlDetails, parse } from 'libpg-query';
import { describeCharIndex, describeLocation } from './position.ts';
import {
  AGGREGATES,
  CLOCK_LITERALS,
  DATETIME_TYPES,
  FORBIDDEN_FUNCTIONS,
  deniedBuiltin,
  describeValueFunction,
  statementKind,
} from './rules.ts';

export const TRANSFORM_PATH = 'transform.sql';

export interface StaticCheckResult {
  problems: Problem[];
  /** Every function called, lower-cased, schema-qualified when written so; for diagnostics. */
  functionNames: string[];
}

const ROW_LOCAL = 'a transform must be row-local (each output row comes from one source row)';
const DETERMINISTIC = 'a transform must be deterministic';
const DENIED = 'a transform may not call it (it would run with the service\'s rights, reading what the release does not declare)';
/** The clauses of a plain SELECT holding its own expressions (FROM is walked separately). */
const SELECT_EXPRESSIONS = [
  'targetList', 'whereClause', 'groupClause', 'havingClause', 'windowClause', 'valuesLists', 'distinctClause',
];
const LOCKS: Readonly<Record<string, string>> = {
  LCS_FORKEYSHARE: 'FOR KEY SHARE',
  LCS_FORSHARE: 'FOR SHARE',
  LCS_FORNOKEYUPDATE: 'FOR NO KEY UPDATE',
  LCS_FORUPDATE: 'FOR UPDATE',
};

export async function checkTransformStatic(sql: string): Promise<StaticCheckResult> {
  const parsed = await parseSingleSelect(sql);
  if ('problem' in parsed) return { problems: [{ path: TRANSFORM_PATH, message: parsed.problem }], functionNames: [] };
  const checker = new Checker(sql);
  const fromSource = checker.analyzeSelect(parsed.select, new Map());
  if (!checker.sawSource) {
    checker.problem('does not read source: a transform is a SELECT over the CTE named source that genfill provides');
  } else if (!fromSource && !checker.definesSource) {
    checker.problem(
      'the outer SELECT does not take its rows from source (source is only read inside a subquery): ' +
        'its rows would not belong to any one source row',
    );
  }
  return { problems: checker.problems, functionNames: [...checker.functionNames] };
}

/** Parses the text and insists on exactly one SELECT; the probe uses this as its guard too. */
export async function parseSingleSelect(
  sql: string,
): Promise<{ select: Record<string, unknown> } | { problem: string }> {
  if (sql.trim() === '') return { problem: 'is empty: a transform is one SELECT over source' };
  let tree: unknown;
  try {
    tree = await parse(sql);
  } catch (err) {
    return { problem: parseErrorMessage(sql, err) };
  }
  const stmts = list(obj(tree)?.stmts);
  if (stmts.length !== 1) {
    return { problem: `must be exactly one SELECT statement, found ${stmts.length === 0 ? 'none' : stmts.length}` };
  }
  const stmt = obj(obj(stmts[0])?.stmt) ?? {};
  const select = obj(stmt.SelectStmt);
  if (select) return { select };
  return { problem: `is ${statementKind(Object.keys(stmt)[0] ?? 'unknown')} statement, not a SELECT: a transform only reads` };
}

/** libpg-query's message plus where it stopped; its cursor counts characters from 0. */
export function parseErrorMessage(sql: string, err: unknown): string {
  if (hasSqlDetails(err) && err.sqlDetails) {
    const { message, cursorPosition } = err.sqlDetails;
    return `${describeCharIndex(sql, cursorPosition)}: ${message}`;
  }
  const message = err instanceof Error ? err.message : String(err);
  return `cannot be parsed: ${message}`;
}

type Obj = Record<string, unknown>;
/** CTE name → whether its rows come from source. */
type Scope = ReadonlyMap<string, boolean>;
/** Aggregates met in one SELECT's own expressions (not in its subqueries). */
interface Level {
  aggregates: { display: string; location: number | undefined }[];
}

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
function obj(v: unknown): Obj | undefined {
  return isObj(v) ? v : undefined;
}
function list(v: unknown): unknown[] {
  return Array.isArray(v) ? v : [];
}
function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}
function own(o: Obj | undefined, key: string): unknown {
  // Node objects come from JSON, but `constructor` (a JsonAggConstructor field) would
  // otherwise read Object.prototype.constructor when absent.
  return o && Object.hasOwn(o, key) ? o[key] : undefined;
}
function names(v: unknown): string[] {
  return list(v).map((p) => str(obj(obj(p)?.String)?.sval) ?? '');
}

/** The first parse-tree location inside a node, for problems on nodes that carry none. */
function firstLocation(node: unknown): number | undefined {
  if (Array.isArray(node)) {
    for (const n of node) {
      const at = firstLocation(n);
      if (at !== undefined) return at;
    }
    return undefined;
  }
  if (!isObj(node)) return undefined;
  if (typeof node.location === 'number' && node.location >= 0) return node.location;
  for (const v of Object.values(node)) {
    const at = firstLocation(v);
    if (at !== undefined) return at;
  }
  return undefined;
}

/** Whether a query mentions an unqualified relation of this name (a CTE's self-reference). */
function mentionsRelation(node: unknown, name: string): boolean {
  if (Array.isArray(node)) return node.some((n) => mentionsRelation(n, name));
  if (!isObj(node)) return false;
  const rv = obj(node.RangeVar);
  if (rv && rv.relname === name && rv.schemaname === undefined) return true;
  return Object.values(node).some((v) => mentionsRelation(v, name));
}

class Checker {
  readonly problems: Problem[] = [];
  readonly functionNames = new Set<string>();
  /** An unqualified relation named `source` appears somewhere. */
  sawSource = false;
  /** The user wrote a CTE named `source` (already a problem; it hides ours). */
  definesSource = false;

  constructor(private readonly sql: string) {}

  problem(message: string, location?: number): void {
    const where = describeLocation(this.sql, location);
    this.problems.push({ path: TRANSFORM_PATH, message: where ? `${where}: ${message}` : message });
  }

  /** Checks one SELECT (plain or set operation); returns whether its rows come from source. */
  analyzeSelect(sel: Obj, outer: Scope, recursiveCte = false): boolean {
    if (sel.intoClause) {
      this.problem('SELECT INTO creates a table: a transform must be a plain SELECT', firstLocation(sel.intoClause));
    }
    for (const item of list(sel.lockingClause)) {
      const strength = str(obj(obj(item)?.LockingClause)?.strength) ?? '';
      this.problem(`${LOCKS[strength] ?? 'FOR UPDATE/SHARE'} locks rows: a transform must be a plain SELECT`);
    }
    const scope = this.analyzeWith(obj(sel.withClause), outer);
    const level: Level = { aggregates: [] };
    const op = str(sel.op) ?? 'SETOP_NONE';
    let fromSource: boolean;
    if (op !== 'SETOP_NONE') {
      fromSource = this.analyzeSetOp(op, sel, scope, recursiveCte);
    } else {
      let readers = 0;
      for (const item of list(sel.fromClause)) {
        const n = this.analyzeFrom(item, scope, level);
        if (n > 0 && readers > 0) {
          this.problem(`reads source twice in one FROM clause (a self-join): ${ROW_LOCAL}`, firstLocation(item));
        }
        readers += n;
      }
      fromSource = readers > 0;
      for (const key of SELECT_EXPRESSIONS) this.walk(sel[key], scope, level);
    }
    for (const key of ['sortClause', 'limitCount', 'limitOffset']) this.walk(sel[key], scope, level);
    if (fromSource) this.requireRowLocal(sel, level);
    return fromSource;
  }

  private requireRowLocal(sel: Obj, level: Level): void {
    const group = list(sel.groupClause);
    if (group.length > 0 || sel.groupDistinct) this.problem(`GROUP BY over source: ${ROW_LOCAL}`, firstLocation(group));
    if (sel.havingClause) this.problem(`HAVING over source: ${ROW_LOCAL}`, firstLocation(sel.havingClause));
    const distinct = list(sel.distinctClause);
    if (distinct.length > 0) {
      // Plain DISTINCT is a list holding one empty node; DISTINCT ON lists its expressions.
      const on = distinct.some((d) => isObj(d) && Object.keys(d).length > 0);
      this.problem(`${on ? 'DISTINCT ON' : 'DISTINCT'} over source: ${ROW_LOCAL}`, firstLocation(distinct));
    }
    const count = obj(sel.limitCount);
    const limitAll = obj(count?.A_Const)?.isnull === true;
    if ((count && !limitAll) || sel.limitOffset) {
      const at = firstLocation(count) ?? firstLocation(sel.limitOffset);
      this.problem(`LIMIT/OFFSET/FETCH over source keeps rows depending on the other rows: ${ROW_LOCAL}`, at);
    }
    for (const agg of level.aggregates) this.problem(`aggregate ${agg.display} over source: ${ROW_LOCAL}`, agg.location);
  }

  private analyzeSetOp(op: string, sel: Obj, scope: Scope, recursiveCte: boolean): boolean {
    const larg = obj(sel.larg);
    const rarg = obj(sel.rarg);
    const left = larg ? this.analyzeSelect(larg, scope) : false;
    const right = rarg ? this.analyzeSelect(rarg, scope) : false;
    const at = firstLocation(rarg);
    const name = op.replace(/^SETOP_/, '');
    if (recursiveCte) {
      if (right) {
        const why = 'each step joins other source rows';
        this.problem(`the recursive part of a WITH RECURSIVE query reads source: ${why}; ${ROW_LOCAL}`, at);
      }
    } else if (op === 'SETOP_UNION' && left !== right) {
      this.problem(`only one side of ${name} reads source: the other side's rows would repeat in every partition`, at);
    } else if (op === 'SETOP_INTERSECT' && left && right) {
      this.problem(`INTERSECT of two reads of source compares source rows with each other: ${ROW_LOCAL}`, at);
    } else if (op === 'SETOP_EXCEPT' && right) {
      this.problem(`the right side of EXCEPT reads source, so other source rows remove rows: ${ROW_LOCAL}`, at);
    }
    return left || right;
  }

  private analyzeWith(withClause: Obj | undefined, outer: Scope): Scope {
    if (!withClause) return outer;
    const scope = new Map(outer);
    for (const item of list(withClause.ctes)) {
      const cte = obj(obj(item)?.CommonTableExpr);
      if (!cte) continue;
      const name = str(cte.ctename) ?? '';
      const location = typeof cte.location === 'number' ? cte.location : undefined;
      if (name === 'source') {
        this.definesSource = true;
        this.problem('defines its own CTE named source, which would hide the partition rows genfill provides; rename it', location);
      }
      const query = obj(cte.ctequery) ?? {};
      const select = obj(query.SelectStmt);
      if (!select) {
        const kind = statementKind(Object.keys(query)[0] ?? 'unknown');
        this.problem(`CTE ${name} is ${kind} statement: a transform only reads`, location);
        scope.set(name, false);
        continue;
      }
      // A recursive CTE sees itself; its self-references are not reads of source.
      const recursive = withClause.recursive === true && mentionsRelation(select, name);
      if (recursive) scope.set(name, false);
      scope.set(name, this.analyzeSelect(select, scope, recursive));
    }
    return scope;
  }

  /** One FROM item; returns how many reads of source it contains (more than one is a self-join). */
  private analyzeFrom(item: unknown, scope: Scope, level: Level): number {
    const node = obj(item) ?? {};
    const rv = obj(node.RangeVar);
    if (rv) {
      const rel = str(rv.relname) ?? '';
      if (rv.schemaname !== undefined || rv.catalogname !== undefined) return 0;
      if (rel === 'source') this.sawSource = true;
      if (scope.has(rel)) return scope.get(rel) ? 1 : 0;
      return rel === 'source' ? 1 : 0;
    }
    const sub = obj(node.RangeSubselect);
    if (sub) {
      const select = obj(obj(sub.subquery)?.SelectStmt);
      return select && this.analyzeSelect(select, scope) ? 1 : 0;
    }
    const join = obj(node.JoinExpr);
    if (join) return this.analyzeJoin(join, scope, level);
    const sample = obj(node.RangeTableSample);
    if (sample) {
      this.problem(`TABLESAMPLE picks rows at random: ${DETERMINISTIC}`, firstLocation(sample.method) ?? firstLocation(sample));
      this.walk(sample.args, scope, level);
      this.walk(sample.repeatable, scope, level);
      return this.analyzeFrom(sample.relation, scope, level);
    }
    // Functions in FROM (generate_series, jsonb_array_elements, XMLTABLE, JSON_TABLE…) only
    // see source through lateral column references: still one source row at a time.
    this.walk(node, scope, level);
    return 0;
  }

  private analyzeJoin(join: Obj, scope: Scope, level: Level): number {
    const left = this.analyzeFrom(join.larg, scope, level);
    const right = this.analyzeFrom(join.rarg, scope, level);
    if (left > 0 && right > 0) {
      this.problem(`joins source with itself (a self-join): ${ROW_LOCAL}`, firstLocation(join.rarg));
    }
    this.walk(join.quals, scope, level);
    const type = str(join.jointype) ?? '';
    const keepsLeft = type === 'JOIN_LEFT' || type === 'JOIN_FULL';
    const keepsRight = type === 'JOIN_RIGHT' || type === 'JOIN_FULL';
    if ((keepsLeft && left === 0 && right > 0) || (keepsRight && right === 0 && left > 0)) {
      const sql = type.replace(/^JOIN_/, '');
      this.problem(
        `${sql} JOIN keeps rows that match no source row: they would appear in every partition`,
        firstLocation(join.rarg),
      );
    }
    return left + right;
  }

  /** Expressions of one SELECT: functions, clock reads, and subqueries (checked on their own). */
  private walk(node: unknown, scope: Scope, level: Level): void {
    if (Array.isArray(node)) {
      for (const n of node) this.walk(n, scope, level);
      return;
    }
    if (!isObj(node)) return;
    for (const [key, value] of Object.entries(node)) {
      const v = obj(value);
      if (key === 'SubLink' && v) {
        this.walk(v.testexpr, scope, level);
        this.subquery(obj(obj(v.subselect)?.SelectStmt), scope, typeof v.location === 'number' ? v.location : undefined);
      } else if (key === 'SelectStmt' && v) {
        // Subqueries outside SubLinks, e.g. JSON_ARRAY(SELECT …).
        this.subquery(v, scope, firstLocation(v));
      } else if (key === 'FuncCall' && v) {
        this.visitFuncCall(v, level);
        this.walk(v, scope, level);
      } else if (key === 'SQLValueFunction' && v) {
        const { sql, reason } = describeValueFunction(str(v.op) ?? '');
        this.problem(`${sql} ${reason}: ${DETERMINISTIC}`, typeof v.location === 'number' ? v.location : undefined);
      } else if (key === 'ParamRef' && v) {
        // A transform has no parameters; in a parameterised statement a `$n` would read the
        // statement's own values (generation, dataset) instead of failing.
        const at = typeof v.location === 'number' ? v.location : undefined;
        this.problem(`the parameter placeholder $${String(v.number ?? '?')} has no value: a transform takes no parameters`, at);
      } else if (key === 'TypeCast' && v) {
        this.visitTypeCast(v);
        this.walk(v, scope, level);
      } else if (key === 'GroupingFunc' && v) {
        level.aggregates.push({ display: 'GROUPING(...)', location: firstLocation(v) });
        this.walk(v, scope, level);
      } else if ((key === 'JsonArrayAgg' || key === 'JsonObjectAgg') && v) {
        const ctor = obj(own(v, 'constructor'));
        const display = key === 'JsonArrayAgg' ? 'JSON_ARRAYAGG(...)' : 'JSON_OBJECTAGG(...)';
        const at = typeof ctor?.location === 'number' ? ctor.location : undefined;
        if (ctor?.over) this.problem(`window function ${display} OVER compares rows with each other: ${ROW_LOCAL}`, at);
        else level.aggregates.push({ display, location: at });
        this.walk(v, scope, level);
      } else {
        this.walk(value, scope, level);
      }
    }
  }

  private subquery(select: Obj | undefined, scope: Scope, location: number | undefined): void {
    if (select && this.analyzeSelect(select, scope)) {
      this.problem(`a subquery in an expression reads source, so the result depends on other source rows: ${ROW_LOCAL}`, location);
    }
  }

  private visitFuncCall(call: Obj, level: Level): void {
    const parts = names(call.funcname).map((p) => p.toLowerCase());
    const name = parts.join('.');
    this.functionNames.add(name);
    const base = parts[parts.length - 1] ?? '';
    const builtin = parts.length === 1 || parts[0] === 'pg_catalog';
    const location = typeof call.location === 'number' ? call.location : undefined;
    const display = `${name}(${call.agg_star ? '*' : '...'})`;
    if (call.over) {
      this.problem(`window function ${display} OVER compares rows with each other: ${ROW_LOCAL}`, location);
    } else if (
      call.agg_star ||
      call.agg_distinct ||
      call.agg_within_group ||
      call.agg_filter ||
      list(call.agg_order).length > 0 ||
      (builtin && AGGREGATES.has(base))
    ) {
      level.aggregates.push({ display, location });
    }
    // Matched in any schema: extension functions (uuid_generate_v4) live where installed.
    const reason = FORBIDDEN_FUNCTIONS.get(base);
    if (reason) this.problem(`${name}() ${reason}: ${DETERMINISTIC}`, location);
    const denied = builtin || base.startsWith('dblink') ? deniedBuiltin(base) : null;
    if (denied) this.problem(`${name}() ${denied}: ${DENIED}`, location);
  }

  /** `'now'::timestamptz`, `date 'today'`: the input function reads the clock. */
  private visitTypeCast(cast: Obj): void {
    const constant = obj(obj(cast.arg)?.A_Const);
    const literal = str(obj(constant?.sval)?.sval)?.trim().toLowerCase();
    const type = names(obj(cast.typeName)?.names).pop() ?? '';
    if (literal && CLOCK_LITERALS.has(literal) && DATETIME_TYPES.has(type)) {
      const at = typeof constant?.location === 'number' ? constant.location : undefined;
      this.problem(`'${literal}'::${type} reads the clock: ${DETERMINISTIC}`, at);
    }
  }
}
