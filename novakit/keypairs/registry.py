"""Key pairs: create (generate or import), list, show, delete, and a boot's ``key_name``.

Pairs are a user's (Nova's ``key_pairs`` table in the API database): a caller acts on its
own (``ctx.user_id``); naming another user (``user_id``) needs ``keypair:any_user``, and
without it another user's pair looks like one that does not exist. The quota ``key_pairs``
counts a user's pairs (``quota.check_user_count``), rechecked in the transaction that writes
the new one. The private key of a generated pair is in the returned view once
(``private_key``) and nowhere else: not in the database, a log, an event or a fault.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy, quota
from novakit.compute.schemas import parse
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import KeyPair
from novakit.keypairs import keys
from novakit.keypairs.schemas import KeyPairCreate, check_key_name

#: the comment of a generated pair's public key (Nova writes ``Generated-by-Nova``)
GENERATED_COMMENT = "Generated-by-novakit"


def view(row: KeyPair) -> dict[str, Any]:
    return {
        "name": row.name,
        "type": row.type,
        "fingerprint": row.fingerprint,
        "public_key": row.public_key,
        "user_id": row.user_id,
        "created_at": row.created_at,
    }


def _user(ctx: RequestContext, user_id: str | None) -> str:
    """Whose pairs the call is about: the caller's own, or ``user_id`` for an admin."""
    if user_id is None or user_id == ctx.user_id:
        return ctx.user_id
    policy.authorize(ctx, "keypair:any_user")
    return user_id


def _get(session: Session, user_id: str, name: str) -> KeyPair:
    row = session.execute(
        select(KeyPair).where(KeyPair.user_id == user_id, KeyPair.name == name)
    ).scalar_one_or_none()
    if row is None:
        raise exceptions.KeypairNotFound(name=name, user_id=user_id)
    return row


def create(
    db: Database, conf: Config, ctx: RequestContext, data: dict[str, Any], *, dry_run: bool = False
) -> dict[str, Any]:
    """Create a key pair: import ``public_key``, or generate one (``algorithm``, ed25519 unless
    ``rsa``). The view carries ``private_key`` for a generated pair, this once.

    ``dry_run`` (check mode): every check in a read, nothing written and nothing generated
    (the view's ``fingerprint`` is None for a pair that would be generated).
    """
    req = parse(KeyPairCreate, data)
    if req.public_key is not None and req.algorithm is not None:
        raise exceptions.ValidationError(
            "algorithm", "is for a generated pair only: an imported public_key has its own type"
        )
    user_id = _user(ctx, req.user_id)
    public_key = req.checked_public_key()
    private_key: str | None = None
    if public_key is None and not dry_run:
        pair = keys.generate(req.algorithm or "ed25519", GENERATED_COMMENT)
        public_key, private_key = pair.public_key, pair.private_key
    row = KeyPair(
        name=req.name,
        user_id=user_id,
        type=req.type,
        public_key=public_key or "",
        fingerprint=keys.fingerprint(public_key) if public_key else "",
    )

    def write(session: Session) -> dict[str, Any]:
        if session.execute(
            select(KeyPair.id).where(KeyPair.user_id == user_id, KeyPair.name == req.name)
        ).first():
            raise exceptions.KeyPairExists(name=req.name, user_id=user_id)
        if dry_run:
            quota.check_user_count(session, conf, ctx.project_id, user_id, "key_pairs", 1)
            return {**view(row), "fingerprint": row.fingerprint or None}
        session.add(row)
        session.flush()
        # The recheck, counting the row just added, under the user's lock (two creates at once).
        quota.check_user_count(session, conf, ctx.project_id, user_id, "key_pairs", 0, lock=True)
        return view(row)

    try:
        made = db.run_or_dry_run(write, dry_run=dry_run)
    except IntegrityError:
        # Another call made a pair of that name between the check and the insert.
        raise exceptions.KeyPairExists(name=req.name, user_id=user_id) from None
    if private_key is not None:
        made["private_key"] = private_key
    return made


def list_keypairs(db: Database, ctx: RequestContext, *, user_id: str | None = None) -> list[dict[str, Any]]:
    """The user's pairs by name (the caller's own, or ``user_id``'s for an admin)."""
    user = _user(ctx, user_id)
    with db.reader() as session:
        rows = session.execute(
            select(KeyPair).where(KeyPair.user_id == user).order_by(KeyPair.name)
        ).scalars()
        return [view(r) for r in rows]


def show(db: Database, ctx: RequestContext, name: str, *, user_id: str | None = None) -> dict[str, Any]:
    user = _user(ctx, user_id)
    with db.reader() as session:
        return view(_get(session, user, name))


def find(
    db: Database, ctx: RequestContext, name: str, *, user_id: str | None = None
) -> dict[str, Any] | None:
    """The pair named ``name``, or None (the catalog module's look-up)."""
    try:
        return show(db, ctx, name, user_id=user_id)
    except exceptions.KeypairNotFound:
        return None


def delete(
    db: Database, ctx: RequestContext, name: str, *, user_id: str | None = None, dry_run: bool = False
) -> None:
    """Delete a pair. Servers booted with it keep the key they were given (``key_data``)."""
    user = _user(ctx, user_id)

    def write(session: Session) -> None:
        row = _get(session, user, name)
        if not dry_run:
            session.delete(row)

    db.run_or_dry_run(write, dry_run=dry_run)


def for_boot(session: Session, ctx: RequestContext, key_name: str, field: str = "key_name") -> KeyPair:
    """The caller's pair a server is booted (or rebuilt) with, as Nova looks it up: the
    requesting user's, by name. Unknown: refused naming ``field`` (Nova's 400 "Invalid
    key_name provided.")."""
    try:
        check_key_name(key_name)
    except ValueError as exc:
        raise exceptions.ValidationError(field, f"Invalid key_name provided: {exc}") from None
    row = session.execute(
        select(KeyPair).where(KeyPair.user_id == ctx.user_id, KeyPair.name == key_name)
    ).scalar_one_or_none()
    if row is None:
        raise exceptions.ValidationError(
            field, f"Invalid key_name provided: user {ctx.user_id!r} has no key pair named {key_name!r}"
        )
    return row
