"""The ledger's schema: tables, ordered migrations, the column order of a stored row, and the
SQL dialects (SQLite and PostgreSQL) the store speaks.

``MIGRATIONS[v]`` takes a database from schema version ``v`` to ``v + 1``; ``SCHEMA_VERSION`` is
their count, stored in ``meta.schema_version``. A migration is never edited once released: a
change is a new migration at the end. ``COLUMNS`` is the order of a row of ``requests`` as
:func:`promptcache.ledger.records.build_row` makes it and :mod:`promptcache.ledger.store` inserts it.
"""

from __future__ import annotations

# Portable DDL: {pk} / {float} / {bigint} are filled per dialect.
MIGRATIONS: list[list[str]] = [
    # version 1
    [
        """CREATE TABLE IF NOT EXISTS requests (
            id {pk},
            record_id TEXT NOT NULL UNIQUE,
            ts {float} NOT NULL,
            day TEXT NOT NULL,
            provider TEXT,
            model TEXT,
            api TEXT,
            prefix_hash TEXT,
            uncached_input_tokens {bigint} NOT NULL,
            cache_read_tokens {bigint} NOT NULL,
            cache_write_tokens {bigint} NOT NULL,
            cache_write_5m_tokens {bigint} NOT NULL,
            cache_write_1h_tokens {bigint} NOT NULL,
            output_tokens {bigint} NOT NULL,
            reasoning_tokens {bigint},
            cache_reported INTEGER NOT NULL,
            cost_pusd {bigint},
            baseline_pusd {bigint},
            price_json TEXT,
            latency_ms {float},
            ttft_ms {float},
            stream INTEGER NOT NULL DEFAULT 0,
            flags TEXT,
            metadata TEXT,
            prompt_text TEXT
        )""",
        "CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts)",
        "CREATE INDEX IF NOT EXISTS requests_prefix ON requests (prefix_hash)",
    ],
    # version 2: prices move to their own table (one row per distinct price), so a record
    # is ~200 bytes instead of ~550 and summary() scans less
    [
        "CREATE TABLE IF NOT EXISTS prices (id {pk}, price_json TEXT NOT NULL UNIQUE)",
        "ALTER TABLE requests ADD COLUMN price_id {bigint}",
        "{ins} prices (price_json) SELECT DISTINCT price_json FROM requests "
        "WHERE price_json IS NOT NULL{tail}",
        "UPDATE requests SET price_id = (SELECT p.id FROM prices p "
        "WHERE p.price_json = requests.price_json) WHERE price_json IS NOT NULL",
        "ALTER TABLE requests DROP COLUMN price_json",
    ],
    # version 3: an hourly rollup per (provider, model, prefix_hash, api), maintained in
    # the same transaction as each insert, so summary() reads O(groups) rows instead of
    # scanning every record (NULL keys are stored as '' so that the upsert key matches)
    [
        """CREATE TABLE IF NOT EXISTS rollup (
            hour {bigint} NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
            prefix_hash TEXT NOT NULL, api TEXT NOT NULL,
            requests {bigint} NOT NULL, uncached_input_tokens {bigint} NOT NULL,
            cache_read_tokens {bigint} NOT NULL, cache_write_tokens {bigint} NOT NULL,
            output_tokens {bigint} NOT NULL, reported_read {bigint} NOT NULL,
            reported_prompt {bigint} NOT NULL, unreported {bigint} NOT NULL,
            cost_pusd {bigint} NOT NULL, baseline_pusd {bigint} NOT NULL,
            unpriced {bigint} NOT NULL, misses {bigint} NOT NULL,
            latency_sum {float} NOT NULL, latency_n {bigint} NOT NULL,
            PRIMARY KEY (hour, provider, model, prefix_hash, api))""",
        """{ins} rollup SELECT {hour} AS h, COALESCE(provider, ''), COALESCE(model, ''),
            COALESCE(prefix_hash, ''), COALESCE(api, ''), COUNT(*),
            SUM(uncached_input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens),
            SUM(output_tokens), SUM(cache_reported * cache_read_tokens),
            SUM(cache_reported * (uncached_input_tokens + cache_read_tokens
                                  + cache_write_tokens)),
            COUNT(*) - SUM(cache_reported), COALESCE(SUM(cost_pusd), 0),
            COALESCE(SUM(baseline_pusd), 0), COUNT(*) - COUNT(cost_pusd),
            SUM(cache_reported * {zero_read}), COALESCE(SUM(latency_ms), 0), COUNT(latency_ms)
            FROM requests GROUP BY 1, 2, 3, 4, 5{tail}""",
    ],
    # version 4: summaries by prefix read the rollup; the per-record prefix index only
    # slowed every insert
    ["DROP INDEX IF EXISTS requests_prefix"],
    # version 5: miss attribution -- each record's cause, where it lies, its lineage and
    # its digest chain (segment digests; the atoms of each distinct segment once, in
    # ``segments``). Columns are added, so every committed record stays as it was.
    [
        "ALTER TABLE requests ADD COLUMN miss_cause TEXT",
        "ALTER TABLE requests ADD COLUMN miss_path TEXT",
        "ALTER TABLE requests ADD COLUMN matched_prefix_tokens {bigint}",
        "ALTER TABLE requests ADD COLUMN miss_offset_chars {bigint}",
        "ALTER TABLE requests ADD COLUMN miss_offset_tokens {bigint}",
        "ALTER TABLE requests ADD COLUMN miss_detail TEXT",
        "ALTER TABLE requests ADD COLUMN miss_excerpt TEXT",
        "ALTER TABLE requests ADD COLUMN lineage TEXT",
        "ALTER TABLE requests ADD COLUMN chain TEXT",
        "CREATE TABLE IF NOT EXISTS segments (digest TEXT PRIMARY KEY, atoms TEXT NOT NULL)",
    ],
]

ROLLUP_SUMS = (
    "requests",
    "uncached_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reported_read",
    "reported_prompt",
    "unreported",
    "cost_pusd",
    "baseline_pusd",
    "unpriced",
    "misses",
    "latency_sum",
    "latency_n",
)
SCHEMA_VERSION = len(MIGRATIONS)

COLUMNS = (
    "record_id",
    "ts",
    "day",
    "provider",
    "model",
    "api",
    "prefix_hash",
    "uncached_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_reported",
    "cost_pusd",
    "baseline_pusd",
    "price_id",
    "latency_ms",
    "ttft_ms",
    "stream",
    "flags",
    "metadata",
    "prompt_text",
    "miss_cause",
    "miss_path",
    "matched_prefix_tokens",
    "miss_offset_chars",
    "miss_offset_tokens",
    "miss_detail",
    "miss_excerpt",
    "lineage",
    "chain",
)


class Dialect:
    """SQLite: the placeholders, DDL fragments and expressions the store and queries use."""

    name = "sqlite"
    param = "?"
    ddl = {
        "pk": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "float": "REAL",
        "bigint": "INTEGER",
        "ins": "INSERT OR IGNORE INTO",
        "tail": "",
        "hour": "CAST(ts / 3600 AS INTEGER)",
        "zero_read": "(cache_read_tokens = 0)",
    }
    insert_ignore = "INSERT OR IGNORE INTO"
    conflict_tail = ""
    hour_expr = "CAST(ts / 3600 AS INTEGER)"
    is_zero_read = "(cache_read_tokens = 0)"
    meta_expr = "json_extract(metadata, '$.{key}')"


class PgDialect(Dialect):
    """PostgreSQL (through psycopg): the same slots as :class:`Dialect`."""

    name = "postgresql"
    param = "%s"
    ddl = {
        "pk": "BIGSERIAL PRIMARY KEY",
        "float": "DOUBLE PRECISION",
        "bigint": "BIGINT",
        "ins": "INSERT INTO",
        "tail": " ON CONFLICT DO NOTHING",
        "hour": "CAST(FLOOR(ts / 3600) AS BIGINT)",
        "zero_read": "CAST(cache_read_tokens = 0 AS INTEGER)",
    }
    insert_ignore = "INSERT INTO"
    conflict_tail = " ON CONFLICT (record_id) DO NOTHING"
    hour_expr = "CAST(FLOOR(ts / 3600) AS BIGINT)"
    is_zero_read = "CAST(cache_read_tokens = 0 AS INTEGER)"
    meta_expr = "(metadata::jsonb ->> '{key}')"
