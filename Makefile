# Build and install taskisol's programs, man pages, service and example configuration.
#
#   make                                   # cargo build --release
#   make install                           # below /usr/local, unit in /usr/local/lib/systemd/system
#   make install PREFIX=/usr DESTDIR=/tmp/pkg   # as a distribution package would
#   make uninstall PREFIX=/usr
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
RELEASE_DIR ?= target/release
INSTALL ?= install

.PHONY: all build install install-files uninstall

all: build

build:
	$(CARGO) build --release --locked -p isold -p chisol

install: build install-files

install-files:
	$(INSTALL) -Dm755 $(RELEASE_DIR)/isold $(DESTDIR)$(BINDIR)/isold
	$(INSTALL) -Dm755 $(RELEASE_DIR)/chisol $(DESTDIR)$(BINDIR)/chisol
	$(INSTALL) -Dm644 man/isold.8 $(DESTDIR)$(MANDIR)/man8/isold.8
	$(INSTALL) -Dm644 man/isold.toml.5 $(DESTDIR)$(MANDIR)/man5/isold.toml.5
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
