"""Volumes, Cinder-shaped: disks in one host's storage pool that outlive the servers they serve.

``states`` holds the statuses, the one table of steps between them and when a volume in a
transitional one is abandoned (``novakit.heal.volumes`` settles it); ``volumes`` creates, lists,
shows and deletes them (a claim of DISK_GB on their host, the quota, the host's volume_create /
volume_delete); ``attachments`` attaches them to and detaches them from servers as instance actions
(``attach_volume`` / ``detach_volume`` of ``novakit.compute.states``).
"""
