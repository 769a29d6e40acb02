"""Heal: make the database agree with what the hypervisors actually run.

Nova does this in periodic tasks on every compute host and, at start-up, in
``ComputeManager._init_instance``; novakit runs it when asked (``novakit
heal``, ``playbooks/heal.yml``), from the controller, with the hosts' guest
lists (uuid -> power state) either fetched through each host's transport or
handed in by a playbook that ran the ``compute`` module there.

What it corrects, and why each rule is what it is:

* **Power state** follows Nova's ``_sync_instance_power_state``: an instance
  with a task running is left to its owner (the task will write its own
  result; see *interrupted tasks* for one whose owner is gone); the recorded
  power state becomes the reported one; and then by vm_state:

  - ``active`` whose guest is SHUTDOWN or CRASHED: Nova calls its stop API, so
    heal records a ``stop`` action and the instance ends ``stopped``.
    A guest found SUSPENDED is stopped the same way (Nova does too), which
    needs a real power-off on the host.
  - ``active`` whose guest is PAUSED: only the power state changes (Nova: ignore).
  - ``stopped`` whose guest runs (or is paused or suspended): Nova force-stops
    it; heal powers it off through the host and records ``stop``.
  - ``paused`` whose guest is SHUTDOWN or CRASHED: force-stopped, ``stopped``.
  - ``suspended``, ``rescued``, ``resized``, ``error``: power state only.

* **A vanished guest** (the host answered and the guest is not there): Nova
  records NOSTATE and leaves an active instance as it is; novakit puts it in
  ``error`` with a fault, because a server a user believes runs and that
  cannot run is an error, and the state table then offers what helps (rebuild,
  hard reboot, delete). An instance already in error gets NOSTATE only.

* **Interrupted tasks** (a task state set, its owner gone: the lease of the
  request that started it ran out, see ``novakit.conductor``) are finished or
  rolled back as Nova's ``_init_instance`` does when a compute service starts
  again, by the guest's real power state. Heal first takes the task over (a
  guarded write that expects the old owner and an expired lease, so a live
  owner or a second heal wins instead), then records the outcome in the
  task's own action (its request's), with a ``conductor_heal_interrupted_task``
  event that names the rule. ``TASK_RULES`` is the table:

  ==================  ==========================  ===========================================
  task_state          guest found                 heal does (Nova's rule)
  ==================  ==========================  ===========================================
  deleting            any, or none                finish the delete: destroy the guest if the
                                                  host has it, soft-delete, free the claims
                                                  (Nova deletes again)
  powering-off        SHUTDOWN, CRASHED           record ``stopped`` (Nova retries the stop,
                      otherwise                   which finds it off); else stop it again
  powering-on         RUNNING                     record ``active``; else start it again
                      otherwise                   (Nova retries the start)
  rebooting           RUNNING                     soft reboot again (a pending reboot is
                                                  retried)
                      not running                 hard reboot instead, ``rebooting_hard``
                                                  (Nova: a soft reboot that stopped the guest
                                                  became a hard one)
  rebooting_hard      any                         hard reboot again (Nova retries it)
  pausing             PAUSED                      record ``paused`` (it happened)
                      otherwise                   roll back: ``active``, the task cleared
                                                  (Nova: running guest, task cleared)
  unpausing           RUNNING                     record ``active`` (Nova clears the task)
                      PAUSED                      unpause again (Nova retries the unpause)
  suspending          SUSPENDED                   record ``suspended``; otherwise roll back
                                                  as for pausing
  resuming            RUNNING                     record ``active``; SUSPENDED: resume
                                                  again, as for unpausing
  rebuilding          any                         ``error`` with a fault (Nova: an
                                                  interrupted rebuild is in error)
  scheduling ...      (building) see *builds*
  any other           any                         the task is cleared, the power state
                                                  recorded (Nova clears snapshot and resize
                                                  preparation states)
  ==================  ==========================  ===========================================

  Nova leaves a few of these as they were (``pausing`` with a paused guest,
  ``suspending``, ``resuming``, a task on an ``error`` instance); novakit
  applies the same rule to every vm_state, because nothing else would ever
  clear them. A guest that vanished during a task (other than a delete) puts
  its server in ``error`` as above, and the task's action is finished with
  the fault. Work redone on a host that fails is recorded as the action's
  failure (the table's ``on_failure``: a delete or hard reboot ends in error).

* **Builds stuck in building** whose owner is gone (their lease, renewed at
  every build round, ran out; a build without a lease counts from
  ``created_at`` plus ``conf.compute.build_timeout``, as Nova's
  ``_check_instance_build_time``): if the host lists the guest, the build
  finished and only its result was lost (a killed playbook): the server is
  recorded as built and keeps its claim. Otherwise: error, a fault, an event
  on the ``create`` action, and, once the host has answered without the
  guest, the claim freed and the host let go (as a failed build's).

* **Orphan allocations** (their consumer is no live instance, nor a live volume, nor a move
  that holds its source's claim) are removed.

* **Moves** (``novakit.heal.moves``): an interrupted resize, migration, evacuation, snapshot,
  shelve or rescue is settled by where its guest is (rolled back to its source while the
  source has it; the records follow a guest that only its destination has); a host back up
  loses the old guests of servers evacuated from it; resizes past
  ``compute.resize_confirm_window`` are confirmed and servers shelved longer than
  ``compute.shelved_offload_time`` are offloaded; a guest a move keeps on its source, or
  brings to its destination, is no orphan. An interrupted offload or unshelve ends where its
  guest says (``MoveRecovery._settle_unshelve``); a ``shelved`` server whose guest left its
  host is offloaded, not in error; a move whose server no longer exists (a delete cut off
  after the record went) ends as the delete would have ended it: guests and claims gone.

* **Orphan attachments**: a volume attached (in the records) to a server that no longer exists
  is detached in the records and ``available`` again (``novakit.volume.attachments``).

* **Interrupted interface attaches** (``novakit.heal.interfaces``): a port bound to a live
  server that does not list it among its NICs, unchanged for ``conf.compute.build_timeout``, is
  an attach cut off before its end: its host detaches the NIC (idempotent) and the port is
  released (one the attach made is deleted, a given one unbound), as the attach's own rollback.

* **Interrupted image uploads** (``novakit.heal.uploads``, a run over every host): an image
  left ``saving`` whose row and partial file have not changed for ``conf.compute.build_timeout``
  (the process that wrote it is gone) is ``queued`` again and its partial file removed
  (``novakit.catalog.image_data``); its upload can be made again.

* **Interrupted volume operations** (``novakit.heal.volumes``): a volume left in a transitional
  status for longer than ``conf.compute.build_timeout`` (``novakit.volume.states.abandoned``;
  volumes have no owner or lease, so their last change counts) is settled as Cinder's volume
  manager does at start-up (``init_host``), the guest's definition on its host deciding an
  attach or a detach (``get_info`` reports the volumes in it):

  ==============  ==========================  ===========================================
  volume status   found                       heal does
  ==============  ==========================  ===========================================
  creating        (the host is not asked)     ``error``, "interrupted" (Cinder); its claim
                                              stays until the volume is deleted
  reserved        (the host is not asked)     ``available``, the attachment removed (the
                                              attach never started)
  attaching       in the guest's definition   ``in-use``
                  not (or no guest)           ``available``, the attachment removed
  detaching       in the guest's definition   ``in-use`` again
                  not (or no guest)           ``available``, the attachment removed
  deleting        (the host deletes again)    the row soft-deleted, its claim freed; a host
                                              that refuses: ``error_deleting`` (its reason)
  error_deleting  -                           left for the user to delete again (Cinder)
  ==============  ==========================  ===========================================

  A root volume of a server still building is the build's (see *builds*). A volume whose host
  does not answer (or whose driver cannot list a guest's volumes) is left as it is and
  reported with the reason; each write expects the status and last change heal read.

* **Stray copies**: a move into a cell copies a server's records there and then
  points its mapping at them (``novakit.cells.moves``); one cut off in between
  leaves a copy the mapping does not point at. Once the copy's lease ran out
  (the move is over), it is removed; the server is where its mapping says.

* **Orphan guests** (no live instance on that host owns them) are reported and
  destroyed only when ``destroy_orphans`` is set.

* **Unmanaged guests** (domains novakit did not create, which no host lists as
  novakit's) are left alone, unless ``import_unmanaged`` is set: then every host
  that answered has them imported as servers with claims, by
  ``novakit.fleet.importer`` (the same decisions as ``novakit host import``),
  into ``import_project`` (default the caller's); each is an ``imported_guest``
  correction, not applied when refused (its ``error`` says why).

**Cells** (``novakit.cells``): the instances of every cell are read, and each
correction is written in the cell of its instance; stuck builds and abandoned
actions are looked for in every cell. A cell whose database does not answer is
reported (``down_cells``) and left as it is, as Nova's heal does per cell: its
servers are not corrected, the hosts mapped to it are not asked, and no guest
or claim is called an orphan while the cell that may hold its server is down.
Whether a guest or a claim has a live server is decided by its instance mapping
and the mapped cell's record, never by one database's rows: a server may be
moving between databases.

**Heals at once** (a timer and a playbook, two operators): every write is guarded, so of two
heals that found the same thing one wins each write; the loser records that correction as
skipped (``HealerBase._write``, ``base.LOST_RACE``) and goes on, and a step cut short by a lost
race outside its own writes ends there without ending the run (``HealerBase._tolerant``).

An instance whose row changed after the hosts were asked is skipped: its
guest list is older than its record. Every write is guarded by the states it
read (and a take-over by the owner it read), so a user's concurrent action
wins and heal skips that instance. ``clock`` is heal's "now", for its leases
and their expiry (tests move it instead of sleeping).
"""
