// The one way genfill sends a statement that contains text a person supplied (a transform,
// wrapped by any service): always over the extended query protocol. PostgreSQL's simple-query
// protocol runs every statement of a string it receives, so a transform that closes genfill's
// parentheses and appends `; UPDATE genfill.datasets …; COMMIT; BEGIN; …` would run those
// statements as the service (issue 28, finding 1). The extended protocol (Parse/Bind/Execute)
// refuses a second statement outright ("cannot insert multiple commands into a prepared
// statement", 42601), whatever the text holds. node-pg 8.x sends a query over the extended
// protocol only when it has parameter values — or when its config says `queryMode:
// 'extended'` (node_modules/pg/lib/query.js requiresPreparation), which this sets every time.
//
// This is a second wall, not the first: admitTransform (admit.ts) has already parsed the text
// as exactly one SELECT. It also holds a single statement to that one statement, so a data-
// modifying CTE smuggled in by unbalanced parentheses still has to pass the parse check.
import type { QueryResult, QueryResultRow } from 'pg';
import type { Query } from '@genfill/contracts';

interface Queryable {
  query<R extends QueryResultRow>(config: { text: string; values?: unknown[] }): Promise<QueryResult<R>>;
}

/** Runs one statement containing person-supplied SQL over the extended protocol. */
export function queryUserSql<R extends QueryResultRow = Record<string, unknown>>(
  client: Queryable,
  text: string | Query,
  values?: readonly unknown[],
): Promise<QueryResult<R>> {
  const q = typeof text === 'string' ? { text, values: values ?? [] } : { text: text.text, values: values ?? text.values ?? [] };
  // `queryMode` is node-pg's, absent from its type definitions.
  const config = { text: q.text, values: [...q.values], queryMode: 'extended' } as { text: string; values: unknown[] };
  return client.query<R>(config);
}
