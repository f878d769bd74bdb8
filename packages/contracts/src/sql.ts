// Identifiers are quoted with these helpers; values always travel as parameters. Names
// cannot, so every name is quoted (never trusted to be a plain identifier).

export function quoteIdent(name: string): string {
  if (name.length === 0) throw new Error('an SQL identifier must not be empty');
  if (name.includes('\0')) throw new Error(`SQL identifier ${JSON.stringify(name)} contains a NUL byte`);
  return `"${name.replace(/"/g, '""')}"`;
}

/** `public.orders` → `"public"."orders"`. Names in a release are validated as schema.name. */
export function quoteQualified(name: string): string {
  const parts = name.split('.');
  if (parts.length !== 2 || parts.some((p) => p.length === 0)) {
    throw new Error(`expected a schema-qualified name, got ${JSON.stringify(name)}`);
  }
  return parts.map(quoteIdent).join('.');
}

/** A parameterised query: text with $n placeholders and its values. */
export interface Query {
  text: string;
  values: unknown[];
}
