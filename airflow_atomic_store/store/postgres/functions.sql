-- The mutation functions: every primitive stays one statement (see schema.py).
-- Run without parameters, so percent signs here are ordinary characters.
CREATE OR REPLACE FUNCTION atomic_store_fail_v1(field text, problem text) RETURNS jsonb
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'AS001', MESSAGE = problem, DETAIL = field;
END
$fn$;

CREATE OR REPLACE FUNCTION atomic_store_set_v1(
    doc jsonb, path jsonb, depth integer, new_value jsonb, field text, prefix text
) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    segment jsonb := path -> depth;
    last boolean := depth = jsonb_array_length(path) - 1;
    here text := CASE WHEN prefix = '' THEN 'the row value' ELSE quote_literal(prefix) END;
    key text;
    idx integer;
BEGIN
    IF jsonb_typeof(segment) = 'string' THEN
        key := segment #>> '{}';
        IF doc IS NULL THEN
            doc := '{}'::jsonb;
        ELSIF jsonb_typeof(doc) <> 'object' THEN
            RETURN atomic_store_fail_v1(field, format(
                'cannot set through %s: it is a %s, not an object', here, jsonb_typeof(doc)));
        END IF;
        IF last THEN
            RETURN doc || jsonb_build_object(key, new_value);
        END IF;
        RETURN doc || jsonb_build_object(key, atomic_store_set_v1(
            doc -> key, path, depth + 1, new_value, field,
            CASE WHEN prefix = '' THEN key ELSE prefix || '.' || key END));
    END IF;
    idx := segment::integer;
    IF doc IS NULL OR jsonb_typeof(doc) <> 'array' THEN
        RETURN atomic_store_fail_v1(field, format(
            'cannot index %s: it is a %s, not an array', here,
            coalesce(jsonb_typeof(doc), 'missing value')));
    END IF;
    IF idx >= jsonb_array_length(doc) THEN
        RETURN atomic_store_fail_v1(field, format(
            'index %s is out of range for %s (length %s)', idx, here, jsonb_array_length(doc)));
    END IF;
    IF NOT last THEN
        new_value := atomic_store_set_v1(
            doc -> idx, path, depth + 1, new_value, field, prefix || '[' || idx || ']');
    END IF;
    RETURN jsonb_set(doc, ARRAY[idx::text], new_value);
END
$fn$;

CREATE OR REPLACE FUNCTION atomic_store_get_v1(doc jsonb, path jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    segment jsonb;
    i integer;
BEGIN
    FOR i IN 0 .. jsonb_array_length(path) - 1 LOOP
        segment := path -> i;
        IF jsonb_typeof(segment) = 'string' THEN
            doc := doc -> (segment #>> '{}');
        ELSIF jsonb_typeof(doc) = 'array' THEN
            -- only arrays: on a scalar, "-> 0" would return the scalar itself
            doc := doc -> (segment::integer);
        ELSE
            RETURN NULL;
        END IF;
        EXIT WHEN doc IS NULL;
    END LOOP;
    RETURN doc;
END
$fn$;

-- The exact decimal value of a double, with at least one fractional digit (a float
-- stays a float): numeric's own cast from float8 keeps 15 significant digits. |x| is
-- m * 2^-h for an integer m below 2^53; scaling a double by a power of two is exact.
CREATE OR REPLACE FUNCTION atomic_store_exact_v1(x float8) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    m float8 := abs(x);
    h integer := 0;
    base numeric;
    n integer;
    power numeric := 1;
BEGIN
    WHILE m >= 9007199254740992 LOOP  -- 2^53; m stays above 2^33, a normal double
        m := m / 1048576;
        h := h - 20;
    END LOOP;
    WHILE m * 1048576 <> trunc(m * 1048576) LOOP  -- m < 2^52 here: no overflow
        m := m * 1048576;
        h := h + 20;
    END LOOP;
    WHILE m <> trunc(m) LOOP
        m := m * 2;
        h := h + 1;
    END LOOP;
    -- 2^-h as an exact numeric by squaring (numeric products are exact)
    base := CASE WHEN h > 0 THEN 0.5 ELSE 2 END;
    n := abs(h);
    WHILE n > 0 LOOP
        IF n % 2 = 1 THEN
            power := power * base;
        END IF;
        n := n / 2;
        IF n > 0 THEN
            base := base * base;
        END IF;
    END LOOP;
    RETURN round(sign(x)::numeric * m::bigint::numeric * power, greatest(h, 1));
END
$fn$;

CREATE OR REPLACE FUNCTION atomic_store_add_v1(current jsonb, delta jsonb, field text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    a numeric;
    b numeric := delta::numeric;
    total numeric;
    total_float float8;
BEGIN
    IF current IS NULL OR jsonb_typeof(current) = 'null' THEN
        a := 0;
    ELSIF jsonb_typeof(current) <> 'number' THEN
        RETURN atomic_store_fail_v1(field, format(
            'cannot increment a %s; increment needs a number', jsonb_typeof(current)));
    ELSE
        a := current::numeric;
    END IF;
    -- Integers stay integers (exact); a fractional operand makes it a float,
    -- added in double precision as Python does.
    IF scale(a) = 0 AND scale(b) = 0 THEN
        total := a + b;
        IF total < -9223372036854775808 OR total > 9223372036854775807 THEN
            RETURN atomic_store_fail_v1(field, 'increment result is outside the 64-bit range');
        END IF;
        RETURN to_jsonb(total);
    END IF;
    BEGIN
        total_float := a::float8 + b::float8;  -- raises on overflow to infinity
    EXCEPTION WHEN numeric_value_out_of_range THEN
        RETURN atomic_store_fail_v1(field, 'increment result is not a finite number');
    END;
    RETURN to_jsonb(atomic_store_exact_v1(total_float));  -- as jsonb.py writes floats
END
$fn$;

-- A keyed call's result, refused (SQLSTATE AS002, the statement aborts) when it is too
-- large to record: store/contract.py's MAX_RESULT_BYTES, bound by the statement.
CREATE OR REPLACE FUNCTION atomic_store_receipt_v1(result jsonb, max_bytes bigint)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    size bigint := pg_column_size(result);
BEGIN
    IF size > max_bytes THEN
        RAISE EXCEPTION USING ERRCODE = 'AS002', MESSAGE = 'result too large for its receipt',
            DETAIL = size::text, HINT = max_bytes::text;
    END IF;
    RETURN result;
END
$fn$;

CREATE OR REPLACE FUNCTION atomic_store_apply_v1(doc jsonb, mutations jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    m jsonb;
    i integer;
    new_value jsonb;
BEGIN
    FOR i IN 0 .. jsonb_array_length(mutations) - 1 LOOP
        m := mutations -> i;
        IF m ->> 'op' = 'set' THEN
            new_value := m -> 'value';
        ELSE
            new_value := atomic_store_add_v1(
                atomic_store_get_v1(doc, m -> 'path'), m -> 'value', m ->> 'field');
        END IF;
        doc := atomic_store_set_v1(doc, m -> 'path', 0, new_value, m ->> 'field', '');
    END LOOP;
    RETURN doc;
END
$fn$;
