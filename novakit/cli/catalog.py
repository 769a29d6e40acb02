"""``novakit flavor`` and ``novakit image``: what servers are built with and from.

Every command is one library call (``base.call``), so ``--os-cloud`` runs it in ``novakit serve``.
An image is registered at a location on the compute hosts: nothing is read from this machine, so
``image create`` goes through a cloud as it is (an image's data is uploaded with the Image API:
``openstack image create --file``)."""

from __future__ import annotations

import typer

from novakit import exceptions
from novakit.cli import output
from novakit.cli.base import call, console, flavor_app, group, guard, image_app, key_values
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format, Record
from novakit.cli.verbs import Noun

FLAVOR_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("VCPUs", "vcpus"),
    Col("RAM", "ram"),
    Col("Disk", "disk"),
    Col("Ephemeral", "ephemeral"),
    Col("Swap", "swap"),
    Col("Is Public", "is_public"),
]
FLAVOR_LONG_COLUMNS = [
    *FLAVOR_COLUMNS,
    Col("Properties", "extra_specs"),
    Col("Description", "description"),
]
IMAGE_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Disk Format", "disk_format"),
    Col("Visibility", "visibility"),
    Col("Checksum", "checksum"),
    Col("Location", "location"),  # empty for a member: where the file is is the operator's
]
IMAGE_FIELDS = [
    *IMAGE_COLUMNS[:4],
    Col("Owner", "owner"),
    Col("Status", "status"),
    Col("Container Format", "container_format"),
    Col("Size", "size"),
    Col("Min Disk", "min_disk"),
    Col("Min RAM", "min_ram"),
    *IMAGE_COLUMNS[4:],
    Col("Properties", "properties"),
]
FLAVOR = Noun(flavor_app, "flavor", FLAVOR_LONG_COLUMNS, "novakit.catalog.flavors", "name")
IMAGE = Noun(image_app, "image", IMAGE_FIELDS, "novakit.catalog.images", "name")
MEMBER_COLUMNS = [Col("Image ID", "image_id"), Col("Member ID", "member_id"), Col("Status", "status")]


@flavor_app.command("create")
def flavor_create(
    name: str = typer.Argument(..., help="the flavor's name"),
    vcpus: int = typer.Option(..., help="vCPUs"),
    ram: int = typer.Option(..., help="RAM in MB"),
    disk: int = typer.Option(0, help="root disk in GB"),
    ephemeral: int = typer.Option(0, help="ephemeral disk in GB"),
    swap: int = typer.Option(0, help="swap in MB"),
    flavor_id: str | None = typer.Option(None, "--id", help="flavor id (default: a new uuid)"),
    prop: list[str] | None = typer.Option(None, "--property", help="extra spec key=value (repeat)"),
) -> None:
    """Create a flavor (admin only)."""
    from novakit.catalog import flavors

    specs = dict(p.split("=", 1) for p in (prop or []) if "=" in p)
    data = {
        "name": name,
        "vcpus": vcpus,
        "memory_mb": ram,
        "root_gb": disk,
        "ephemeral_gb": ephemeral,
        "swap": swap,
        "flavorid": flavor_id,
        "extra_specs": specs,
    }
    f = guard(lambda: call(flavors.create, data))
    console.print(f"flavor {f['name']} created ({f['id']})")


@flavor_app.command("list")
def flavor_list(
    long: bool = typer.Option(False, "--long", help="more columns: swap, properties, description"),
    public: bool = typer.Option(False, "--public", help="public flavors only (the default)"),
    private: bool = typer.Option(False, "--private", help="private flavors only (admin only)"),
    every: bool = typer.Option(False, "--all", help="public and private flavors (admin only)"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """The flavors servers can be created with (openstack flavor list)."""
    from novakit.catalog import flavors

    which = "all" if every else "private" if private else "public"
    rows = guard(lambda: call(flavors.list_flavors, which=which))
    columns = FLAVOR_LONG_COLUMNS if long or column else FLAVOR_COLUMNS
    guard(lambda: output.emit_list(rows, columns, fmt, out, column, "flavors"))


FLAVOR.show("One flavor (openstack flavor show).", lambda flavors, name: call(flavors.show, name))
FLAVOR.delete(
    "Delete a flavor (admin only); servers built with it keep their copy of it.",
    lambda flavors, name: call(flavors.delete, name),
)


# --- images (openstack image ...) -----------------------------------------------------------

image_add_app = group("Add a project to an image (share it).", image_app, "add")
image_remove_app = group("Remove a project from an image (stop sharing it).", image_app, "remove")
image_member_app = group("The projects an image is shared with.", image_app, "member")

PUBLIC = typer.Option(False, "--public", help="visible to every project")
PRIVATE = typer.Option(False, "--private", help="visible to its owner project only")
SHARED = typer.Option(False, "--shared", help="its owner and the projects it is shared with")
COMMUNITY = typer.Option(False, "--community", help="anyone who names it; listed only on request")
VISIBILITY = typer.Option(None, "--visibility", help="public, private, shared or community")


def _visibility(public: bool, private: bool, shared: bool, community: bool, given: str | None) -> str | None:
    """The one visibility the flags and ``--visibility`` name (None: none named)."""
    named = [
        v
        for v, on in (("public", public), ("private", private), ("shared", shared), ("community", community))
        if on
    ]
    if given is not None:
        named.append(given)
    if len(set(named)) > 1:
        raise exceptions.ValidationError(
            "visibility", f"give one of --public, --private, --shared, --community (got {', '.join(named)})"
        )
    return named[0] if named else None


@image_app.command("create")
def image_create(
    name: str = typer.Argument(..., help="the image's name"),
    location: str | None = typer.Option(
        None, help="required: the file on the compute hosts, an absolute path or a file:/// URL"
    ),
    disk_format: str = typer.Option("qcow2", help="qcow2, raw, aki, ari, ami"),
    checksum: str | None = typer.Option(None, help="sha256 of the file"),
    prop: list[str] | None = typer.Option(None, "--property", help="image property key=value (repeat)"),
    public: bool = PUBLIC,
    private: bool = PRIVATE,
    shared: bool = SHARED,
    community: bool = COMMUNITY,
    visibility: str | None = VISIBILITY,
) -> None:
    """Register an image (admin only): a file the compute hosts can read; public unless told."""
    from novakit.catalog import images

    def data() -> dict[str, object]:
        if not location:
            raise exceptions.ValidationError("location", "is required: the image's file on the compute hosts")
        wanted = _visibility(public, private, shared, community, visibility)
        return {
            "name": name,
            "location": location,
            "disk_format": disk_format,
            "checksum": checksum,
            "properties": key_values(prop),
            **({"visibility": wanted} if wanted is not None else {}),
        }

    request = guard(data)
    i = guard(lambda: call(images.create, request))
    console.print(f"image {i['name']} created ({i['id']}, {i['visibility']})")


@image_app.command("list")
@output.lists(IMAGE_COLUMNS, "images")
def image_list(
    public: bool = PUBLIC,
    private: bool = PRIVATE,
    shared: bool = SHARED,
    community: bool = COMMUNITY,
    visibility: str | None = VISIBILITY,
) -> list[Record]:
    """The images you may boot from (community images only with --community)."""
    from novakit.catalog import images

    wanted = _visibility(public, private, shared, community, visibility)
    return call(images.list_images, visibility=wanted)


IMAGE.show("One image.", lambda images, name: call(images.show, name), title=None)


def _say_membership(m: Record) -> None:
    console.print(f"image {m['image_id']}: project {m['member_id']} {m['status']}")


@image_app.command("set")
def image_set(
    name: str = typer.Argument(..., help="image name or id"),
    public: bool = PUBLIC,
    private: bool = PRIVATE,
    shared: bool = SHARED,
    community: bool = COMMUNITY,
    visibility: str | None = VISIBILITY,
    accept: bool = typer.Option(False, "--accept", help="accept the image shared with your project"),
    reject: bool = typer.Option(False, "--reject", help="reject the image shared with your project"),
    pending: bool = typer.Option(False, "--pending", help="set your membership back to pending"),
    project: str | None = typer.Option(
        None, "--project", help="with --accept/--reject/--pending: the member project (admin only)"
    ),
) -> None:
    """Change an image's visibility (its owner), or accept or reject one shared with you."""
    from novakit.catalog import image_members, images

    statuses = [s for s, on in (("accepted", accept), ("rejected", reject), ("pending", pending)) if on]

    def checked() -> str | None:
        wanted = _visibility(public, private, shared, community, visibility)
        if len(statuses) > 1:
            raise exceptions.ValidationError("--accept/--reject/--pending", "give one of them")
        if wanted is None and not statuses:
            raise exceptions.ValidationError(
                "image set", "nothing to set: give a visibility, or --accept, --reject or --pending"
            )
        return wanted

    wanted = guard(checked)
    if wanted is not None:
        i = guard(lambda: call(images.set_visibility, name, wanted))
        console.print(f"image {i['name']} is {i['visibility']}")
    if statuses:
        _say_membership(guard(lambda: call(image_members.set_member_status, name, statuses[0], project)))


@image_add_app.command("project")
def image_add_project(
    image: str = typer.Argument(..., help="image name or id (a shared image of your project)"),
    project: str = typer.Argument(..., help="the project to share it with"),
) -> None:
    """Share an image with a project; it sees the image once it accepts (image set --accept)."""
    from novakit.catalog import image_members

    _say_membership(guard(lambda: call(image_members.add_member, image, project)))


@image_remove_app.command("project")
def image_remove_project(
    image: str = typer.Argument(..., help="image name or id"),
    project: str = typer.Argument(..., help="the project to stop sharing it with"),
) -> None:
    """Stop sharing an image with a project."""
    from novakit.catalog import image_members

    guard(lambda: call(image_members.remove_member, image, project))
    console.print(f"image {image}: project {project} removed")


@image_member_app.command("list")
@output.lists(MEMBER_COLUMNS, "members")
def image_member_list(image: str = typer.Argument(..., help="image name or id")) -> list[Record]:
    """The projects an image is shared with (a member sees its own membership only)."""
    from novakit.catalog import image_members

    return call(image_members.list_members, image)


IMAGE.delete(
    "Delete an image (its owner's or an admin's) and what the image store holds of it; servers "
    "built from it keep running.",
    lambda images, name: call(images.remove, name),
)
