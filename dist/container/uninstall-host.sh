#!/bin/busybox sh
# The uninstall Job (dist/kubernetes/isold-uninstall.yaml), run once the DaemonSet's pods are
# gone: every value isold changed goes back to its original (isold restore, from the node's
# state files), then what the DaemonSet put on the node is removed. A value that cannot be
# restored stops it first: the state files and the hook stay for another try.
set -e
bb=/bin/busybox
/usr/bin/isold restore
# The hook first: a container started from now on asks nothing of a daemon that is gone.
$bb rm -f /host/usr/share/containers/oci/hooks.d/isold.json /host/usr/local/bin/isold
# Their contents, dot files (the run lock) included: the directories are the pod's mounts.
$bb rm -rf /run/isold/* /run/isold/.[!.]* /var/lib/isold/* /var/lib/isold/.[!.]*
$bb rmdir /run/isold /var/lib/isold 2>/dev/null || true
echo "isold: uninstalled: every value restored, the hook and isold's state removed from the node"
