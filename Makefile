# Build and install taskisol's programs, man pages, service and example configuration.
#
#   make                                   # cargo build --release
#   make install                           # below /usr/local, unit in /usr/local/lib/systemd/system
#   make install PREFIX=/usr DESTDIR=/tmp/pkg   # as a distribution package would
#   make uninstall PREFIX=/usr
#   make deb                               # the Debian package, target/debian/taskisol_*.deb, linted
#
# install-files installs what is built without building (packagers build first).
# /etc/isold/isold.toml is never written: the example goes next to it, as isold.toml.example,
# and isold.service starts only once isold.toml exists (ConditionPathExists). uninstall leaves
# /etc/systemd/system.conf.d (systemd's own directory) and /var/lib/isold (the originals of the
# files isold wrote: run isold restore first).

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
# Where podman and CRI-O read OCI hook definitions (oci-hooks(5)): a fixed path, not below PREFIX.
HOOKSDIR ?= /usr/share/containers/oci/hooks.d
CARGO ?= cargo
# Where cargo puts them: CARGO_TARGET_DIR when set (a worktree sharing a build directory).
RELEASE_DIR ?= $(or $(CARGO_TARGET_DIR),target)/release
INSTALL ?= install
# The Debian package: the workspace's version and a Debian revision.
DEB_VERSION ?= $(shell sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' Cargo.toml)-1
DEB_DIR ?= $(or $(CARGO_TARGET_DIR),target)/debian

.PHONY: all build install install-files uninstall deb deb-package deb-lint

all: build

build:
	$(CARGO) build --release --locked -p isold -p chisol

install: build install-files

install-files:
	$(INSTALL) -Dm755 $(RELEASE_DIR)/isold $(DESTDIR)$(BINDIR)/isold
	$(INSTALL) -Dm755 $(RELEASE_DIR)/chisol $(DESTDIR)$(BINDIR)/chisol
	$(INSTALL) -Dm644 man/isold.8 $(DESTDIR)$(MANDIR)/man8/isold.8
	# The items' paragraphs come from their declarations in the library (isold items).
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man5
	$(RELEASE_DIR)/isold items --man-page man/isold.toml.5 >$(DESTDIR)$(MANDIR)/man5/isold.toml.5
	chmod 644 $(DESTDIR)$(MANDIR)/man5/isold.toml.5
	$(INSTALL) -Dm644 man/chisol.1 $(DESTDIR)$(MANDIR)/man1/chisol.1
	$(INSTALL) -d $(DESTDIR)$(UNITDIR)
	sed 's|\([= ]\)/etc/isold/|\1$(SYSCONFDIR)/isold/|g; s|^ExecStart=/usr/bin/isold run|ExecStart=$(BINDIR)/isold --config $(SYSCONFDIR)/isold/isold.toml run|' \
		dist/isold.service >$(DESTDIR)$(UNITDIR)/isold.service
	chmod 644 $(DESTDIR)$(UNITDIR)/isold.service
	$(INSTALL) -Dm644 dist/isold.toml $(DESTDIR)$(SYSCONFDIR)/isold/isold.toml.example
	$(INSTALL) -d $(DESTDIR)$(HOOKSDIR)
	sed 's|"path": "/usr/bin/isold"|"path": "$(BINDIR)/isold"|' dist/oci/isold.json >$(DESTDIR)$(HOOKSDIR)/isold.json
	chmod 644 $(DESTDIR)$(HOOKSDIR)/isold.json
	# systemd's drop-in directory, where the systemd_cpuaffinity item writes: isold.service can
	# make an existing directory writable, not create one.
	$(INSTALL) -d $(DESTDIR)/etc/systemd/system.conf.d

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/isold $(DESTDIR)$(BINDIR)/chisol \
		$(DESTDIR)$(MANDIR)/man8/isold.8 $(DESTDIR)$(MANDIR)/man5/isold.toml.5 \
		$(DESTDIR)$(MANDIR)/man1/chisol.1 $(DESTDIR)$(UNITDIR)/isold.service \
		$(DESTDIR)$(SYSCONFDIR)/isold/isold.toml.example $(DESTDIR)$(HOOKSDIR)/isold.json

# deb-package packages what is built without building, as install-files installs it (the QEMU
# test packages two versions of the same binaries); deb-lint runs Debian's lintian on it
# (installed with apt when missing, as root): errors fail, warnings are printed.
deb: build deb-package deb-lint

deb-package:
	scripts/build-deb $(DEB_VERSION) $(DEB_DIR) $(RELEASE_DIR)

deb-lint:
	@command -v lintian >/dev/null || { [ "$$(id -u)" = 0 ] || { echo "make deb-lint: lintian is missing: sudo apt-get install -y lintian" >&2; exit 1; }; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian >/dev/null; }
	lintian --fail-on error $(DEB_DIR)/taskisol_$(DEB_VERSION)_$$(dpkg --print-architecture).deb
