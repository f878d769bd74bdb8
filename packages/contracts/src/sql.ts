// Identifiers are quoted with these helpers; values always travel as parameters.

export function quoteIdent(name: string): string {
  if (name.length === 0) throw new Error('empty SQL identifier');
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
