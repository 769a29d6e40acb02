"""Every error novakit raises, in one place.

The hierarchy, with the HTTP-like ``code`` each class carries (as Nova's do;
the code decides whether a fault keeps a traceback and whether a non-admin
sees the text)::

    NovakitError (500)
    ├── Invalid (400) ............... the caller asked for something malformed
    │   ├── ValidationError ......... a field broke a rule: names field and rule
    │   │   └── VolumeNotReserved ... a volume action asked of a volume not reserved for it
    │   ├── InstanceInvalidState (409)  the action is not allowed in this state
    │   │   ├── InstanceNeverLaunched . its launch never finished (Nova's must_have_launched)
    │   │   └── InstanceHostDown ...... its host is down and the action needs it up
    │   ├── InvalidImage ............ bad image data (format, checksum, path)
    │   └── ConfigError ............. a configuration value is wrong
    ├── Forbidden (403)
    │   ├── PolicyNotAuthorized
    │   ├── IdentityNotAllowed ...... a call named an identity its caller may not take
    │   ├── InstanceIsLocked (409)
    │   └── OverQuota ............... a project quota would be exceeded
    ├── NotFound (404)
    │   ├── InstanceNotFound, FlavorNotFound, ImageNotFound,
    │   ├── ComputeHostNotFound, ServerGroupNotFound, ResourceProviderNotFound, KeypairNotFound
    │   ├── ConsumerAllocationsNotFound  the consumer holds no allocations
    │   ├── FlavorExtraSpecsNotFound, FlavorAccessNotFound
    │   └── MarkerNotFound .......... a listing's marker names no server of the listing
    ├── Conflict (409)
    │   ├── UnexpectedTaskStateError  a guarded state write lost a race
    │   │   └── UnexpectedDeletingTaskStateError
    │   ├── DuplicateName ........... a live server of that name exists
    │   ├── KeyPairExists ........... the user has a key pair of that name
    │   ├── FlavorAccessExists ...... the project has access to the private flavor already
    │   ├── HostInUse ............... a host that still has servers or claims cannot be deleted
    │   ├── ConcurrentUpdateDetected  retries of a compare-and-swap ran out
    │   ├── AllocationNotFits ....... allocations asked do not fit a provider's inventory now
    │   └── ServerDiffers ........... a declared server exists with another flavor or image
    ├── NoValidHost (500) ........... the scheduler found nowhere to go;
    │                                 ``explanation`` says why for each host
    ├── ServerStateError (409) ...... a declared server cannot get, or did not get, where it was
    │   │                             asked to be (``novakit.desired``); ``server`` is its view,
    │   │                             ``changed`` whether work had started
    │   ├── StateUnreachable ........ nothing takes it there from where it is (ERROR, busy)
    │   ├── WaitTimeout (504) ....... it was not there in time; the work goes on
    │   ├── WorkerEnded (500) ....... its background worker ended before it got there
    │   └── ServerFailed (500) ...... the work left it in ERROR; its fault says why
    ├── ComputeError (500) .......... raised on a compute host
    │   ├── RescheduledError ........ this host failed; another may succeed
    │   ├── BuildAbortError ......... stop: no other host would do better
    │   ├── InstanceNotRunning, InstancePowerOffFailure
    │   ├── ActionSuperseded ........ a later action on the instance ran on its host first
    │   └── HypervisorUnavailable ... the host's hypervisor cannot be reached
    ├── DatabaseNotMigrated ......... the database's schema is missing or older than this novakit
    ├── InvalidCell (400) ........... a cell's database is unreachable or of the wrong kind
    ├── CellNotFound (404), CellInUse (409), HostMappedElsewhere (409)
    ├── CellDown (503) .............. a cell's database cannot be reached now
    ├── CellNotTargeted ............. a bug: instance tables used with no cell targeted
    ├── networks (``novakit.network``, Neutron's names):
    │   ├── NetworkNotFound, SubnetNotFound, PortNotFound (404)
    │   ├── SubnetOverlap (400) ..... a subnet's range overlaps another of its network
    │   ├── NetworkInUse, SubnetInUse (409)  still has ports / allocated addresses
    │   ├── DefaultNetworkExists (409)  a second network marked default
    │   ├── PortInUse (409) ......... the port is bound to another server
    │   ├── IpAddressInUse, MacAddressInUse (409)
    │   ├── IpAddressGenerationFailure (409)  no free address left on the network
    │   ├── SecurityGroupNotFound, SecurityGroupRuleNotFound (404)
    │   └── SecurityGroupInUse, SecurityGroupRuleExists, SecurityGroupCannotRemoveDefault,
    │       SecurityGroupExistsForInstance, SecurityGroupNotExistsForInstance (409)
    ├── volumes (``novakit.volume``, Cinder's names):
    │   ├── VolumeNotFound (404)
    │   ├── InvalidVolume (409) ..... its status or host does not allow the request
    │   └── VolumeBackendError ...... (a ComputeError) the host's pool failed
    └── MissingDependency ........... an optional library is not installed

Every class formats ``msg_fmt`` with the keyword arguments it was given, so a
message always names what was wrong and, where the caller can act, what to do.
Any exception that is *not* a ``NovakitError`` is treated as internal: faults
record only its class name as the message, and its text goes to the
admin-only details (as Nova does, since it may carry secrets).
"""

from __future__ import annotations

from typing import Any


class NovakitError(Exception):
    """Base class; ``msg_fmt`` is formatted with the constructor's kwargs."""

    msg_fmt = "An unknown error occurred."
    code = 500

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        self.kwargs = kwargs
        if "code" in kwargs:
            self.code = int(kwargs["code"])
        if message is None:
            try:
                message = self.msg_fmt % kwargs
            except (KeyError, TypeError, ValueError):
                # A missing format argument must not hide the real error.
                message = self.msg_fmt
        self.message = message
        super().__init__(message)

    def format_message(self) -> str:
        return self.message


# --- bad input -------------------------------------------------------------


class Invalid(NovakitError):
    msg_fmt = "Invalid request: %(reason)s"
    code = 400


class ValidationError(Invalid):
    """A request field broke a rule. ``errors`` lists (field, rule) pairs."""

    msg_fmt = "Invalid %(field)s: %(rule)s"

    def __init__(self, field: str, rule: str, errors: list[tuple[str, str]] | None = None) -> None:
        self.field = field
        self.rule = rule
        self.errors = errors or [(field, rule)]
        if len(self.errors) > 1:
            joined = "; ".join(f"{f}: {r}" for f, r in self.errors)
            super().__init__(f"Invalid request: {joined}", field=field, rule=rule)
        else:
            super().__init__(field=field, rule=rule)


class VolumeNotReserved(ValidationError):
    """attach_volume / detach_volume asked of a server for a volume that
    ``novakit.volume.attachments`` did not reserve for it (nor mark detaching from it): the
    action starts only on what that reservation leaves. ``instance_uuid`` is the server."""

    def __init__(self, instance_uuid: str, rule: str) -> None:
        self.instance_uuid = instance_uuid
        super().__init__("options.volume_id", rule)


class InstanceInvalidState(Invalid):
    msg_fmt = (
        "Cannot '%(action)s' instance %(instance_uuid)s while it is in "
        "vm_state %(vm_state)s, task_state %(task_state)s"
    )
    code = 409


class InstanceNeverLaunched(InstanceInvalidState):
    """Nova's ``must_have_launched``: a server whose launch never finished has nothing to act on."""

    msg_fmt = (
        "Cannot '%(action)s' instance %(instance_uuid)s: it was never launched (no launch finished "
        "on its host); delete it, or rebuild it once it has been built"
    )


class InstanceHostDown(InstanceInvalidState):
    """Nova's ``check_instance_host(check_is_up=True)``: the move needs its host's compute service."""

    msg_fmt = (
        "Cannot '%(action)s' instance %(instance_uuid)s: its host %(host)s is down (%(reason)s); "
        "bring the host back, or evacuate the server if the host is gone"
    )


class InvalidImage(Invalid):
    msg_fmt = "Image %(image_id)s is not usable: %(reason)s"


class ConfigError(Invalid):
    msg_fmt = "Configuration error in %(option)s: %(reason)s"


# --- permission and quota --------------------------------------------------


class Forbidden(NovakitError):
    msg_fmt = "Not authorized: %(reason)s"
    code = 403


class PolicyNotAuthorized(Forbidden):
    msg_fmt = "Policy does not allow %(action)s to be performed."


class IdentityNotAllowed(Forbidden):
    msg_fmt = (
        "%(option)s %(value)r may not be given by the call: a caller that is not an admin acts as the "
        "identity its operator gave it (NOVAKIT_PROJECT, NOVAKIT_USER, NOVAKIT_ROLES, or [identity] in "
        "the configuration)"
    )


class InstanceIsLocked(Forbidden):
    msg_fmt = (
        "Instance %(instance_uuid)s is locked%(reason_suffix)s; unlock it first (only an admin may act "
        "on a locked server)"
    )
    code = 409

    def __init__(self, instance_uuid: str, reason: str | None = None) -> None:
        suffix = f" ({reason})" if reason else ""
        super().__init__(instance_uuid=instance_uuid, reason_suffix=suffix)


class InstanceNotReady(Invalid):
    """Nova's check_instance_host: the action needs a host, and no host holds the instance."""

    msg_fmt = (
        "Instance %(instance_uuid)s is not ready: it was never built on a host, so it cannot "
        "'%(action)s'; rebuild needs a host too: delete it and create it again"
    )
    code = 409


class OverQuota(Forbidden):
    msg_fmt = (
        "Quota exceeded for %(resource)s in project %(project_id)s: requested %(requested)s, "
        "in use %(used)s, limit %(limit)s"
    )


# --- not found --------------------------------------------------------------


class NotFound(NovakitError):
    msg_fmt = "Resource could not be found."
    code = 404


class InstanceNotFound(NotFound):
    msg_fmt = "Instance %(instance_id)s could not be found."


class FlavorNotFound(NotFound):
    msg_fmt = "Flavor %(flavor_id)s could not be found."


class FlavorExtraSpecsNotFound(NotFound):
    msg_fmt = "Flavor %(flavor_id)s has no extra spec %(key)s."


class FlavorAccessNotFound(NotFound):
    msg_fmt = "Project %(project_id)s has no access to flavor %(flavor_id)s."


class ImageNotFound(NotFound):
    msg_fmt = "Image %(image_id)s could not be found."


class ComputeHostNotFound(NotFound):
    msg_fmt = "Compute host %(host)s could not be found."


class ServerGroupNotFound(NotFound):
    msg_fmt = "Server group %(group_id)s could not be found."


class KeypairNotFound(NotFound):
    msg_fmt = "Keypair %(name)s not found for user %(user_id)s"


class MarkerNotFound(NotFound):
    """Nova's answer (400 there) to a page marker that is not a server of the listing."""

    msg_fmt = (
        "Invalid marker: %(marker)s is not a server of this listing "
        "(the marker is the id of the last server of the previous page)"
    )


class ResourceProviderNotFound(NotFound):
    msg_fmt = "Resource provider %(name_or_uuid)s could not be found."


# --- conflicts --------------------------------------------------------------


class Conflict(NovakitError):
    msg_fmt = "Conflict: %(reason)s"
    code = 409


class FlavorAccessExists(Conflict):
    msg_fmt = "Project %(project_id)s has access to flavor %(flavor_id)s already."


class KeyPairExists(Conflict):
    msg_fmt = (
        "Invalid name: key pair %(name)r already exists for user %(user_id)s (names are unique per "
        "user); delete it first or choose another name"
    )


class HostInUse(Conflict):
    msg_fmt = "Compute host %(host)s cannot be deleted: %(reason)s"


class UnexpectedTaskStateError(Conflict):
    msg_fmt = "Conflict updating instance %(instance_uuid)s. Expected: %(expected)s. Actual: %(actual)s"


class UnexpectedDeletingTaskStateError(UnexpectedTaskStateError):
    """The instance is being deleted while another operation expected it not to be."""


class DuplicateName(Conflict):
    msg_fmt = "A server named %(name)s already exists in project %(project_id)s"


class ConcurrentUpdateDetected(Conflict):
    msg_fmt = "Gave up after %(attempts)s attempts: %(what)s kept changing under us; try again"


# --- scheduling -------------------------------------------------------------


class NoValidHost(NovakitError):
    """No host can take the request; ``explanation`` says what each step removed."""

    msg_fmt = "No valid host was found. %(reason)s"
    code = 500

    def __init__(self, reason: str = "", explanation: dict[str, Any] | None = None) -> None:
        self.explanation = explanation or {}
        super().__init__("No valid host was found." if not reason else None, reason=reason)


# --- compute side -----------------------------------------------------------


class ComputeError(NovakitError):
    msg_fmt = "Compute operation failed: %(reason)s"


class RescheduledError(ComputeError):
    """The build failed on this host; the conductor may try an alternate."""

    msg_fmt = "Build of instance %(instance_uuid)s was re-scheduled: %(reason)s"


class BuildAbortError(ComputeError):
    """The build failed in a way another host would not fix (bad image, bad request)."""

    msg_fmt = "Build of instance %(instance_uuid)s aborted: %(reason)s"


class InstanceNotRunning(ComputeError):
    msg_fmt = "Instance %(instance_uuid)s is not running."
    code = 409


class InstancePowerOffFailure(ComputeError):
    msg_fmt = "Failed to power off instance %(instance_uuid)s: %(reason)s"


class ActionSuperseded(ComputeError):
    msg_fmt = (
        "Not run: an action on instance %(instance_uuid)s started later (at %(later)s) ran on "
        "this host first; this one (started at %(started)s) would undo it"
    )


class HypervisorUnavailable(ComputeError):
    msg_fmt = "Connection to the hypervisor on %(host)s is broken: %(reason)s"


class DatabaseNotMigrated(NovakitError):
    msg_fmt = (
        "The database %(database)s is not migrated (schema revision %(current)s, this novakit needs "
        "%(head)s): run `novakit db upgrade` or the novakit.cloud.db_upgrade playbook against it first"
    )


class InvalidCell(Invalid):
    """A cell's database is not one novakit can use as a cell; ``reason`` says what is wrong."""

    msg_fmt = "Cell %(cell)s: %(reason)s"


class CellNotFound(NotFound):
    msg_fmt = "Cell %(cell)s could not be found (novakit cell list shows the cells)."


class CellInUse(Conflict):
    msg_fmt = "Cell %(cell)s cannot be deleted: %(reason)s"


class HostMappedElsewhere(Conflict):
    msg_fmt = (
        "Compute host %(host)s is already mapped to cell %(mapped)s, not %(cell)s: a host lives in one cell"
    )


class CellDown(NovakitError):
    """A cell's database did not answer; the other cells go on without it."""

    msg_fmt = "Cell %(cell)s is unreachable: %(reason)s"
    code = 503


class CellNotTargeted(NovakitError):
    msg_fmt = (
        "Internal error: the instance tables were used with no cell targeted "
        "(Database.target_cell); this is a novakit bug"
    )


class MissingDependency(NovakitError):
    msg_fmt = "%(feature)s needs the Python package %(package)s: %(hint)s"
    code = 400


class InventoryInUse(Conflict):
    """A resource class with allocations cannot be removed from a provider (Placement's InventoryInUse)."""

    msg_fmt = (
        "Cannot remove %(resource_class)s from provider %(provider)s: %(used)s is allocated; "
        "free the allocations first"
    )


class AllocationNotFits(Conflict):
    """Allocations asked of a provider do not fit its inventory now (Placement's 409)."""

    msg_fmt = "Unable to allocate inventory: resource provider %(provider)s %(reason)s"


class ConsumerAllocationsNotFound(NotFound):
    msg_fmt = "No allocations for consumer '%(consumer)s'"


class ServerDiffers(Conflict):
    """A declared server exists already with another flavor or image; declaring it again changes neither."""

    msg_fmt = "Server %(name)s exists with %(what)s %(actual)s, not %(wanted)s; %(remedy)s"


# --- declared states (novakit.desired) ----------------------------------------


class ServerStateError(NovakitError):
    """A declared server cannot get, or did not get, to the state asked for.

    ``server`` is the server's view as it was last seen (its status, task state
    and, in ERROR, its fault); ``changed`` says whether work had started, so that
    a caller reports a failed task that changed something as changed.
    """

    msg_fmt = "server %(name)s is %(status)s (task_state: %(task_state)s)"
    code = 409

    def __init__(self, server: dict[str, Any], changed: bool = False, **kwargs: Any) -> None:
        self.server = server
        self.changed = changed
        super().__init__(
            name=server["name"], status=server["status"], task_state=server["task_state"] or "none", **kwargs
        )


class StateUnreachable(ServerStateError):
    """No action takes the server from where it is to the state asked for (``states.path``)."""

    msg_fmt = (
        "server %(name)s is %(status)s (task_state: %(task_state)s); "
        "it cannot be brought to state %(state)s now%(remedy)s"
    )


class WaitTimeout(ServerStateError):
    msg_fmt = (
        "timed out after %(timeout)g s waiting for server %(name)s to be %(wanted)s: "
        "it is %(status)s (task_state: %(task_state)s)%(goes_on)s"
    )
    code = 504


class WorkerEnded(ServerStateError):
    msg_fmt = (
        "server %(name)s is not %(wanted)s and its background worker has ended: "
        "it is %(status)s (task_state: %(task_state)s); see %(log)s"
    )
    code = 500


class ServerFailed(ServerStateError):
    """The work failed: the server is in ERROR (``server["fault"]`` says why), or a move failed
    on a host and was rolled back (``reason`` says why)."""

    msg_fmt = "%(what)s: %(reason)s"
    code = 500


# --- networks (novakit.network) -----------------------------------------------------


class NetworkNotFound(NotFound):
    msg_fmt = "Network %(network)s could not be found (novakit network list shows the networks)."


class SubnetNotFound(NotFound):
    msg_fmt = "Subnet %(subnet)s could not be found (novakit subnet list shows the subnets)."


class PortNotFound(NotFound):
    msg_fmt = "Port %(port)s could not be found (novakit port list shows the ports)."


class SubnetOverlap(Invalid):
    """Neutron refuses a subnet whose range overlaps one of its network's: an address would be ambiguous."""

    msg_fmt = (
        "Invalid subnet_range: %(cidr)s overlaps subnet %(other)s (%(other_cidr)s) of network "
        "%(network)s; the subnets of a network must not overlap"
    )


class NetworkInUse(Conflict):
    msg_fmt = "Network %(network)s cannot be deleted: %(reason)s"


class SubnetInUse(Conflict):
    msg_fmt = "Subnet %(subnet)s cannot be deleted: %(reason)s"


class DefaultNetworkExists(Conflict):
    msg_fmt = (
        "Invalid is_default: network %(network)s is the default network already; at most one network is "
        "the default (unset it there first)"
    )


class PortInUse(Conflict):
    msg_fmt = (
        "Invalid port_id: port %(port)s is in use by server %(device_id)s; a port serves one server at a "
        "time (delete that server, or give another port)"
    )


class IpAddressInUse(Conflict):
    msg_fmt = (
        "Invalid %(field)s: %(ip_address)s is already allocated on network %(network)s; "
        "choose a free address or leave it out to get one"
    )


class MacAddressInUse(Conflict):
    msg_fmt = (
        "Invalid mac_address: %(mac)s is already used by another port; "
        "a MAC address is unique (leave it out to get one)"
    )


class IpAddressGenerationFailure(Conflict):
    msg_fmt = (
        "No more IP addresses available on network %(network)s (its subnets' allocation pools are full); "
        "free addresses or add a subnet"
    )


class SecurityGroupNotFound(NotFound):
    msg_fmt = "Security group %(group)s does not exist (novakit security group list shows the groups)."


class SecurityGroupRuleNotFound(NotFound):
    msg_fmt = (
        "Security group rule %(rule)s does not exist (novakit security group rule list shows the rules)."
    )


class SecurityGroupInUse(Conflict):
    msg_fmt = "Security Group %(group)s in use: %(reason)s"


class SecurityGroupRuleExists(Conflict):
    """Neutron's 409 for a rule equal to one of its group's (its wording, then what to do)."""

    msg_fmt = (
        "Security group rule already exists. Rule id is %(rule_id)s. "
        "(A group holds each rule once; this one allows that traffic already.)"
    )


class SecurityGroupCannotRemoveDefault(Conflict):
    msg_fmt = (
        "Insufficient rights for removing default security group. "
        "(Each project keeps its default group; delete its rules instead, or ask an admin.)"
    )


class SecurityGroupExistsForInstance(Conflict):
    msg_fmt = "Security group %(group)s is already associated with the instance %(instance_id)s"


class SecurityGroupNotExistsForInstance(Conflict):
    msg_fmt = "Security group %(group)s not associated with the instance %(instance_id)s"


# --- volumes (novakit.volume) -------------------------------------------------------


class VolumeNotFound(NotFound):
    msg_fmt = "Volume %(volume)s could not be found (novakit volume list shows the volumes)."


class InvalidVolume(Invalid):
    """Cinder's InvalidVolume: the volume's status (or where it lives) does not allow the request."""

    msg_fmt = "Invalid volume: %(reason)s"
    code = 409


class VolumeBackendError(ComputeError):
    """The host's storage pool could not make, remove, attach or detach the volume."""

    msg_fmt = "Volume %(volume)s: %(reason)s"
