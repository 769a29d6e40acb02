"""The conductor: schedules, hands work to compute hosts, and records what came back.

It is the only writer of compute results into the database, and it is made of parts, each a
small class holding the ``Services`` it works with (``core``: the database, the configuration,
the way to the hosts, the notifier, the scheduler, the clock of leases):

* ``builds.Builds``: the boot flow (schedule, record each host's answer, reschedule); in
  ``novakit serve`` the builds handed to its pool while one is being scheduled wait together
  (``Conductor.build_later``), and those that ask the same are scheduled in one round and their
  answers recorded together, each still its own request (``Builds.first_rounds_together``);
* ``actions.Actions``: a lifecycle action one host runs (prepare its request, record its end);
* ``flows``: one flow object per move type, found in ``flows.FLOWS`` by the name the state
  table's row gives it (resize, live migration, evacuation, snapshot, shelve...).

``Conductor`` holds them and is what callers know: the API hands every action over to it after
its guarded write (``carry_on``); the playbooks, the worker and heal call its steps.

Ownership: the request that starts a build or an action owns it (``task_owner`` = its request
id) and holds a lease (``task_lease_until``) of ``compute.build_timeout`` seconds (a stop's own
timeout on top), taken in the write that starts the task and renewed before every host call
(``renew_leases`` when a worker carries a request on). Heal takes over only tasks whose lease
has run out (``novakit.heal``). An owner whose final state write loses a race tells a deleted
instance (its guest goes, its claim is freed) from one someone else recorded (nothing
destructive happens; the host's events still go to the owner's action, with the lost race as
its message). The caller gets the server as it now is, not an error for work that was done.
"""
