"""inventories.used / inventories.free, kept by triggers on allocations

Before this revision every candidate query summed allocations per provider and
resource class, for every provider it looked at: a scheduling decision at
10,000 providers spent most of its time there. Now each inventory row carries
its usage (``used`` = SUM(allocations.used)) and ``free`` (capacity - used), and
an index on (resource_class, free, resource_provider_id) lets the candidate
query walk providers from the most (or least) free and stop after the few it
needs.

Triggers, not application code, keep the two columns exact: every INSERT,
UPDATE and DELETE of an allocation row, whoever issues it, adjusts the
inventory row of the same provider and class in the same transaction.
``set_inventory`` recomputes ``free`` when a capacity changes (capacity is
``int((total - reserved) * allocation_ratio)``, truncated as Python does, so it
is computed in Python and not in SQL).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

_SQLITE_TRIGGERS = (
    """
    CREATE TRIGGER trg_allocations_usage_insert AFTER INSERT ON allocations BEGIN
        UPDATE inventories SET used = used + NEW.used, free = free - NEW.used
        WHERE resource_provider_id = NEW.resource_provider_id AND resource_class = NEW.resource_class;
    END
    """,
    """
    CREATE TRIGGER trg_allocations_usage_delete AFTER DELETE ON allocations BEGIN
        UPDATE inventories SET used = used - OLD.used, free = free + OLD.used
        WHERE resource_provider_id = OLD.resource_provider_id AND resource_class = OLD.resource_class;
    END
    """,
    """
    CREATE TRIGGER trg_allocations_usage_update
    AFTER UPDATE OF used, resource_provider_id, resource_class ON allocations BEGIN
        UPDATE inventories SET used = used - OLD.used, free = free + OLD.used
        WHERE resource_provider_id = OLD.resource_provider_id AND resource_class = OLD.resource_class;
        UPDATE inventories SET used = used + NEW.used, free = free - NEW.used
        WHERE resource_provider_id = NEW.resource_provider_id AND resource_class = NEW.resource_class;
    END
    """,
)

_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION novakit_allocations_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE inventories SET used = used - OLD.used, free = free + OLD.used
        WHERE resource_provider_id = OLD.resource_provider_id AND resource_class = OLD.resource_class;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        UPDATE inventories SET used = used + NEW.used, free = free - NEW.used
        WHERE resource_provider_id = NEW.resource_provider_id AND resource_class = NEW.resource_class;
    END IF;
    RETURN NULL;
END
$$
"""
_PG_TRIGGER = (
    "CREATE TRIGGER trg_allocations_usage AFTER INSERT OR DELETE OR UPDATE OF used, resource_provider_id, "
    "resource_class ON allocations FOR EACH ROW EXECUTE FUNCTION novakit_allocations_usage()"
)


def upgrade() -> None:
    with op.batch_alter_table("inventories", schema=None) as batch_op:
        batch_op.add_column(sa.Column("used", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("free", sa.Integer(), server_default="0", nullable=False))
        batch_op.create_index(
            "ix_inventories_rc_free_rp", ["resource_class", "free", "resource_provider_id"], unique=False
        )
    conn = op.get_bind()
    used = {
        (rp, rc): int(total)
        for rp, rc, total in conn.execute(
            sa.text(
                "SELECT resource_provider_id, resource_class, SUM(used) FROM allocations "
                "GROUP BY resource_provider_id, resource_class"
            )
        )
    }
    rows = [
        {
            "id": inv_id,
            "used": used.get((rp, rc), 0),
            "free": int((total - reserved) * ratio) - used.get((rp, rc), 0),
        }
        for inv_id, rp, rc, total, reserved, ratio in conn.execute(
            sa.text(
                "SELECT id, resource_provider_id, resource_class, total, reserved, allocation_ratio FROM inventories"
            )
        )
    ]
    if rows:
        conn.execute(sa.text("UPDATE inventories SET used = :used, free = :free WHERE id = :id"), rows)
    if conn.dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        for ddl in _SQLITE_TRIGGERS:
            op.execute(ddl)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS trg_allocations_usage ON allocations")
        op.execute("DROP FUNCTION IF EXISTS novakit_allocations_usage()")
    else:
        for name in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS trg_allocations_usage_{name}")
    with op.batch_alter_table("inventories", schema=None) as batch_op:
        batch_op.drop_index("ix_inventories_rc_free_rp")
        batch_op.drop_column("free")
        batch_op.drop_column("used")
