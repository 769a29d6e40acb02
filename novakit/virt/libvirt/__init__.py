"""The libvirt driver (``novakit.virt.libvirt.driver.LibvirtDriver``).

Importing this package does not import libvirt-python; ``host.import_libvirt``
does, and says what to install when it is missing, so ``novakit`` works
without libvirt on controllers and on hosts that run the fake driver.

Files: ``driver`` (the ComputeDriver), ``host`` (the connection), ``guest``
(power states and operations on one domain), ``config`` (domain XML as typed
objects), ``guestconfig`` (an instance's domain definition, its disks made),
``disks`` (an instance's own disks and console log), ``imagecache`` and
``images`` (verified image copies, overlays), ``configdrive`` (the NoCloud ISO),
``storage`` (disks as volumes in a storage pool of a remote daemon, reached
through libvirt alone), ``volumes`` and ``lvm`` (volumes in a ``dir`` pool or
on an LVM volume group), ``unmanaged`` (guests novakit did not create), ``vif``,
``snapshots`` (a root disk into the image store), ``rescue``, ``migration`` (cold
moves and resize), ``live_migration``, ``handover`` (an instance's files passed
from one daemon to another through libvirt's storage API).
"""
