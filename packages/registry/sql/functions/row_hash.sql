-- The one SQL definition of a row's 64-bit hash (SPEC "Storage layout" -> "Row hash"), as
-- migration 0002_row_hash made it.
--
-- Receipts, roots and reconciliation (invariant 10) all compute
--
--     genfill.row_hash(ARRAY[genfill.canon(col1), genfill.canon(col2), ...])
--
-- with the columns in the dataset's column order. They share this definition and compute it
-- separately; nothing else may hash a row. Every stored receipt and root depends on it:
-- changing any function below needs NEW golden vectors (packages/registry/test/row_hash.test.ts)
-- and a migration that deals with the hashes already stored (the comments at the bottom say so).
--
-- Properties every function here keeps (the test file proves each one):
--
--  * Independent of session settings: TimeZone, DateStyle, IntervalStyle, extra_float_digits,
--    bytea_output. That is why no body uses a STABLE output function (timestamptz_out,
--    date_out, interval_out, to_char, array_out ...): those are exactly the settings-dependent ones.
--
--  * IMMUTABLE *and* inlined by the planner. PostgreSQL inlines a LANGUAGE sql function only if
--    its body is a single expression without sub-selects, it has no SET clause, an IMMUTABLE
--    function's body contains no STABLE/VOLATILE function, a STRICT function's body is provably
--    strict (no CASE, no ARRAY[...], no non-strict function), and a parameter used more than once
--    gets a cheap argument. Hence:
--      - bodies are built from IMMUTABLE primitives only (date_part on timestamp/interval, time_out,
--        numeric_out, hash_array_extended ...). In particular to_char() and the text[] -> text
--        cast (array_out) are declared STABLE and would silently disable inlining;
--      - functions whose body needs CASE are declared CALLED ON NULL INPUT instead of STRICT,
--        and their bodies return NULL for a NULL input by construction. Every function here maps
--        NULL to NULL either way;
--      - row_hash uses its parameter once (its argument, the ARRAY of canons, is never cheap).
--    A non-inlined SQL function costs an executor call per row, several times the cost of the
--    hash itself on a multi-million-row scan.
--
--  * Value semantics: two values of one type get the same canonical text only if PostgreSQL
--    considers them equal (numeric 1.0 = 1, float8 -0 = 0). Not conversely: a few types keep
--    a distinction their '=' ignores, because it is stored and observable (interval '1 day' vs
--    '24 hours', jsonb 1.0 vs 1).

-------------------------------------------------------------------------------------------------
-- canon(x): canonical text of one value.
-------------------------------------------------------------------------------------------------

-- Generic fallback: the type's output function. Canonical and settings-independent for every
-- type whose output function is IMMUTABLE (bool, uuid, jsonb, inet, timetz, oid, ...).
-- For types whose output function is STABLE (enums, money, arrays, composites) the result is
-- still correct for enums but the call is not inlined, and money/arrays of timestamptz etc. DO
-- depend on settings: give such a type its own overload (in this file) before using it in a
-- dataset. jsonb's text is canonical for keys and whitespace but keeps numeric scale:
-- '{"a":1.0}' and '{"a":1}' canon differently although jsonb '=' calls them equal.
-- (A quoted body, because a polymorphic function cannot have a SQL-standard RETURN body; every
-- other function here uses RETURN, so its body is parsed and bound once, at CREATE time, and
-- cannot be redirected by a caller's search_path.)
CREATE OR REPLACE FUNCTION genfill.canon(anyelement) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  AS $$ SELECT $1::text $$;

-- text: itself. By implicit cast also varchar, name and char(n) (whose trailing blanks are
-- insignificant and dropped, as its '=' does). Also makes genfill.canon('literal') resolve.
CREATE OR REPLACE FUNCTION genfill.canon(text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN $1;

-- Integers need their own overloads: without them PostgreSQL's overload resolution picks
-- canon(double precision) for smallint/integer/bigint (float8 is the preferred type of the numeric
-- category), and bigints above 2^53 would lose precision.
CREATE OR REPLACE FUNCTION genfill.canon(smallint) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN $1::text;

CREATE OR REPLACE FUNCTION genfill.canon(integer) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN $1::text;

CREATE OR REPLACE FUNCTION genfill.canon(bigint) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN $1::text;

-- numeric: value semantics. trim_scale drops trailing fractional zeros, so 1, 1.0 and 1.00 all
-- give '1' and 1.50 gives '1.5'; numeric has no negative zero ('-0', '-0.00' give '0');
-- 'NaN', 'Infinity', '-Infinity' as PostgreSQL spells them.
CREATE OR REPLACE FUNCTION genfill.canon(numeric) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN trim_scale($1)::text;

-- double precision. $1::text depends on extra_float_digits, and PostgreSQL 15 offers no
-- settings-independent shortest round-trip output. What it does offer, settings-independent and
-- IMMUTABLE: float8 -> numeric, which keeps 15 significant digits (DBL_DIG, correctly rounded,
-- NOT exact: 0.1::float8 + 0.2 becomes 0.3), and float8send, the exact bits. So:
--   * if the 15-digit decimal reads back as exactly the same float8, it is the canonical text,
--     with trailing zeros trimmed; it is then also the shortest round-trip decimal (any shorter
--     round-trip decimal would be what %.15g rounds to). This covers every value that entered as a
--     decimal of <= 15 digits, 'NaN', 'Infinity', '-Infinity', and -0 (gives '0': -0 = 0);
--   * otherwise (values needing 16 or 17 digits, e.g. 0.1::float8 + 0.2) the exact IEEE-754 bits:
--     'float8:' || 16 hex digits, e.g. 'float8:3fd3333333333334'.
-- The first WHEN sends the few finite values above 1.79769313486231e308 (the largest 15-digit
-- decimal <= the largest float8) straight to their bits: their 15-digit decimal can round up past
-- the largest float8, and reading it back would raise "out of range" (CASE evaluates its WHENs in
-- order, so the read-back never sees them). NaN and the infinities fail that WHEN (NaN sorts above
-- Infinity) and read back fine.
-- Injective: a decimal text reads back to exactly one float8, and the hex branch holds only
-- finite non-zero values, whose bit patterns are unique.
CREATE OR REPLACE FUNCTION genfill.canon(double precision) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
  RETURN CASE
    WHEN abs($1) > '1.79769313486231e308'::double precision AND abs($1) < 'Infinity'::double precision
      THEN 'float8:' || encode(float8send($1), 'hex')
    WHEN $1::numeric::double precision = $1 THEN trim_scale($1::numeric)::text
    ELSE 'float8:' || encode(float8send($1), 'hex')
  END;

-- real: the same rule at float4 precision (float4 -> numeric keeps FLT_DIG = 6 digits), so
-- 0.1::real gives '0.1'; otherwise 'float4:' || 8 hex digits of the exact bits. 3.40282e38 is
-- the largest 6-digit decimal <= the largest float4.
CREATE OR REPLACE FUNCTION genfill.canon(real) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
  RETURN CASE
    WHEN abs($1) > '3.40282e38'::real AND abs($1) < 'Infinity'::real
      THEN 'float4:' || encode(float4send($1), 'hex')
    WHEN $1::numeric::real = $1 THEN trim_scale($1::numeric)::text
    ELSE 'float4:' || encode(float4send($1), 'hex')
  END;

-- date: 'YYYY-MM-DD' whatever DateStyle says; 'infinity' / '-infinity'. Years 1..9999 have four
-- digits (the common case, tested first with two cheap comparisons); later years print all their
-- digits ('12345-01-02'); BC years print PostgreSQL's year number with a minus sign (44 BC ->
-- '-44-03-15'; PostgreSQL has no year 0, so 1 BC is '-1-...'). date_out and to_char are STABLE;
-- date_part on a timestamp and extract on a date are IMMUTABLE. (The date -> timestamp cast is
-- only used inside years 1..9999: dates after 294276 AD have no timestamp.)
CREATE OR REPLACE FUNCTION genfill.canon(date) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
  RETURN CASE
    WHEN $1 >= '0001-01-01'::date AND $1 < '10000-01-01'::date THEN
      lpad(date_part('year', $1::timestamp)::integer::text, 4, '0')
      || '-' || lpad(date_part('month', $1::timestamp)::integer::text, 2, '0')
      || '-' || lpad(date_part('day', $1::timestamp)::integer::text, 2, '0')
    WHEN isfinite($1) THEN
      extract(year FROM $1)::text
      || '-' || lpad(extract(month FROM $1)::text, 2, '0')
      || '-' || lpad(extract(day FROM $1)::text, 2, '0')
    WHEN $1 = 'infinity'::date THEN 'infinity'
    WHEN $1 = '-infinity'::date THEN '-infinity'
  END;

-- time: 'HH24:MI:SS.US', always six fractional digits ('24:00:00.000000' is a valid time).
-- time_out is IMMUTABLE and prints 'HH:MM:SS' plus the fraction with trailing zeros dropped;
-- overlaying that on a template restores the zeros ('12:34:56.5' -> '12:34:56.500000').
CREATE OR REPLACE FUNCTION genfill.canon(time) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN overlay('00:00:00.000000' PLACING $1::text FROM 1);

-- timestamp without time zone: seconds since 1970-01-01 00:00:00 as an exact decimal with
-- trailing zeros dropped, e.g. '1751328000' for 2025-07-01 00:00:00, '1751373296.789' for
-- 12:34:56.789 that day, negative before 1970; 'infinity' / '-infinity'. Why not ISO text:
-- spelling the date out from date_part pieces made this the most expensive canon of all
-- (measured 2.7 s per 2M values against 0.9 s for this form, about 80% of a typical row's
-- hash), and every receipt root and every reconciliation pass pays it per row. The epoch
-- comes from timestamp_mi and extract(epoch from interval), both IMMUTABLE and exact in
-- microseconds, so the function is still inlined. Beyond year 99999 the difference would
-- overflow an interval, so those rare values keep the ISO spelling (they cannot collide: an
-- ISO text has a 'T').
CREATE OR REPLACE FUNCTION genfill.canon(timestamp) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
  RETURN CASE
    WHEN isfinite($1) AND $1 < '100000-01-01 00:00:00'::timestamp THEN
      trim_scale(extract(epoch FROM ($1 - '1970-01-01 00:00:00'::timestamp)))::text
    WHEN isfinite($1) THEN genfill.canon($1::date) || 'T' || genfill.canon($1::time)
    WHEN $1 = 'infinity'::timestamp THEN 'infinity'
    WHEN $1 = '-infinity'::timestamp THEN '-infinity'
  END;

-- timestamptz: seconds since the Unix epoch of the instant, the same form as canon(timestamp)
-- (e.g. '1751328000' for 2025-07-01T00:00:00Z), identical under any TimeZone, DateStyle or
-- IntervalStyle because timestamptz_mi subtracts instants, not wall clocks; 'infinity' /
-- '-infinity'. Years beyond 99999 fall back to the UTC wall clock spelled out with a 'Z'.
-- Why IMMUTABLE is true here, deliberately: timestamptz_mi and extract(epoch from interval)
-- are IMMUTABLE; timestamptz AT TIME ZONE INTERVAL '0' (the fallback) is IMMUTABLE because the
-- zone is a constant, not the session's TimeZone. to_char would give an ISO text just as
-- immutably in fact, but it is declared STABLE, and an IMMUTABLE SQL function whose body calls
-- a STABLE one is never inlined, so it is not used.
CREATE OR REPLACE FUNCTION genfill.canon(timestamptz) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
  RETURN CASE
    WHEN isfinite($1) AND $1 < '100000-01-01 00:00:00+00'::timestamptz THEN
      trim_scale(extract(epoch FROM ($1 - '1970-01-01 00:00:00+00'::timestamptz)))::text
    WHEN isfinite($1) THEN genfill.canon($1 AT TIME ZONE INTERVAL '0') || 'Z'
    WHEN $1 = 'infinity'::timestamptz THEN 'infinity'
    WHEN $1 = '-infinity'::timestamptz THEN '-infinity'
  END;

-- interval: its three stored fields, '<months> mon <days> day <microseconds> us', e.g.
-- '1 mon 2 day 3000000 us' for '1 mon 2 days 3 seconds'. '1 day' ('0 mon 1 day 0 us') and
-- '24 hours' ('0 mon 0 day 86400000000 us') differ, as they do in storage (interval '=' calls
-- them equal, but they add differently to timestamps across DST); independent of IntervalStyle.
-- date_part on an interval is IMMUTABLE; year/month, hour/minute/microseconds are truncated
-- components of the stored months and microseconds, with the sign of the field, and are exact
-- in a float8, so the sums below rebuild the stored fields exactly.
CREATE OR REPLACE FUNCTION genfill.canon(interval) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN (date_part('year', $1)::bigint * 12 + date_part('month', $1)::bigint)::text
      || ' mon ' || date_part('day', $1)::bigint::text
      || ' day ' || (date_part('hour', $1)::bigint * 3600000000
                     + date_part('minute', $1)::bigint * 60000000
                     + date_part('microseconds', $1)::bigint)::text
      || ' us';

-- bytea: '\x' and lower-case hex, whatever bytea_output says.
CREATE OR REPLACE FUNCTION genfill.canon(bytea) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN '\x' || encode($1, 'hex');

-- json: the text of the equivalent jsonb (keys sorted and de-duplicated, last wins; whitespace
-- normalised), so equal documents written differently canon identically. Numeric scale is kept,
-- as for jsonb.
CREATE OR REPLACE FUNCTION genfill.canon(json) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN $1::jsonb::text;

-------------------------------------------------------------------------------------------------
-- row_hash(cols): the 64-bit hash of a row, given the canonical texts of its columns in order.
-------------------------------------------------------------------------------------------------
-- hashtextextended(hash_array_extended(cols COLLATE "C", 0)::text, 0), i.e.
--   1. every element is hashed to 64 bits with hashtextextended(elem, 0); a NULL element
--      contributes 0 (hash_array_extended's rule);
--   2. the element hashes are folded in array order, r := 31 * r + h, starting from r = 1, mod 2^64.
--      31 is odd, so each step is invertible: two arrays of one length that differ in one element
--      always get different r unless those two elements' 64-bit hashes collide (or the element's
--      hash is 0, for NULL vs a value); otherwise collisions are a 2^-64 chance. The length counts
--      too (the leading 1 is multiplied by 31 once per element);
--   3. r is hashed again (hashtextextended of its decimal text), so the result is not linear in
--      the element hashes: sums of row hashes over a partition (invariant 10) do not cancel when
--      values are swapped between rows, as they would with r itself.
-- So NULL, '' and 'NULL' hash differently, ARRAY['a,b'] differs from ARRAY['a','b'], and
-- ARRAY['a',NULL] from ARRAY[NULL,'a'] (the golden vectors pin each case).
--
-- Why not hashtextextended(cols::text, 0), which is injective before hashing (array_out quotes ""
-- and "NULL" and writes a real NULL as bare NULL)?
--   * array_out is declared STABLE, so an IMMUTABLE function with that body is never inlined
--     (measured: twice the cost of the whole hashed scan);
--   * the only IMMUTABLE injective encoding PostgreSQL 15 offers, json_object(keys, cols), needs
--     cols twice (for the keys), and the planner does not inline a function whose parameter is
--     used twice when the argument is expensive, as ARRAY[genfill.canon(..), ...] always is.
-- hash_array_extended takes cols once, is IMMUTABLE and STRICT, and is stable across major
-- versions for the same reason hashtextextended is (hash partitioning stores its results).
--
-- COLLATE "C": without it, a column with a nondeterministic collation (say case-insensitive ICU)
-- passes that collation through canon(text) into the hash, which then hashes the collation's sort
-- key and 'A' and 'a' would hash the same. The same would happen to cols::text.
CREATE OR REPLACE FUNCTION genfill.row_hash(cols text[]) RETURNS bigint
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  RETURN hashtextextended(hash_array_extended(cols COLLATE "C", 0)::text, 0);

-------------------------------------------------------------------------------------------------
-- Comments: the shared definition.
-------------------------------------------------------------------------------------------------
COMMENT ON FUNCTION genfill.canon(anyelement) IS
  'Canonical text of a value (generic fallback: the type''s output function). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(text) IS
  'Canonical text of a text value (itself). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(smallint) IS
  'Canonical text of a smallint (decimal). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(integer) IS
  'Canonical text of an integer (decimal). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(bigint) IS
  'Canonical text of a bigint (decimal). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(numeric) IS
  'Canonical text of a numeric, by value (trim_scale: 1.0 = 1). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(double precision) IS
  'Canonical text of a float8: the <=15-digit decimal if it reads back exactly, else float8:<hex bits>; independent of extra_float_digits. Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(real) IS
  'Canonical text of a float4: the <=6-digit decimal if it reads back exactly, else float4:<hex bits>; independent of extra_float_digits. Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(date) IS
  'Canonical text of a date (YYYY-MM-DD, independent of DateStyle). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(time) IS
  'Canonical text of a time (HH24:MI:SS.US). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(timestamp) IS
  'Canonical text of a timestamp (seconds since 1970-01-01 as an exact decimal, independent of DateStyle). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(timestamptz) IS
  'Canonical text of a timestamptz (seconds since the Unix epoch as an exact decimal, independent of TimeZone and DateStyle). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(interval) IS
  'Canonical text of an interval (<months> mon <days> day <microseconds> us, independent of IntervalStyle). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(bytea) IS
  'Canonical text of a bytea (\x and hex, independent of bytea_output). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.canon(json) IS
  'Canonical text of a json value (its jsonb text). Part of the one row-hash definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';
COMMENT ON FUNCTION genfill.row_hash(text[]) IS
  'The 64-bit hash of a row, given ARRAY[genfill.canon(col), ...] in the dataset''s column order. The one definition shared by receipts, roots and reconciliation; changing it needs a new migration and new golden vectors.';

-- Owned like every genfill function (0002 created these as whoever ran migrate). SECURITY
-- INVOKER and pure: PUBLIC may call them, they do nothing with the caller's rights but hash.
DO $$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname IN ('canon', 'row_hash') LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO genfill_owner', f);
  END LOOP;
END $$;
