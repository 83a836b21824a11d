# Build and install taskisol's programs, man pages, service and example configuration.
#
#   make                                   # cargo build --release
#   make install                           # below /usr/local, unit in /usr/local/lib/systemd/system,
#                                          # libtaskisol for C (lib/, include/taskisol/, taskisol.pc)
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
# Shell completions, where each shell looks for a package's: bash-completion's directory, zsh's
# vendor directory on Debian (site-functions below any other prefix), fish's vendor directory.
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/share/zsh/vendor-completions,$(PREFIX)/share/zsh/site-functions)
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# Where podman and CRI-O read OCI hook definitions (oci-hooks(5)): a fixed path, not below PREFIX.
HOOKSDIR ?= /usr/share/containers/oci/hooks.d
CARGO ?= cargo
# libtaskisol for C programs (make capi, make install-capi), laid out as cargo-c lays it out.
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
CC ?= cc
CAPI := libtaskisol-c
CAPI_VERSION := $(shell sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' Cargo.toml)
CAPI_MAJOR := $(firstword $(subst ., ,$(CAPI_VERSION)))
# What a program linked with libtaskisol.a needs besides it (rustc --print native-static-libs).
CAPI_PRIVATE_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
# Where cargo puts them: CARGO_TARGET_DIR when set (a worktree sharing a build directory).
RELEASE_DIR ?= $(or $(CARGO_TARGET_DIR),target)/release
INSTALL ?= install
# The Debian package: the workspace's version and a Debian revision.
DEB_VERSION ?= $(shell sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' Cargo.toml)-1
DEB_DIR ?= $(or $(CARGO_TARGET_DIR),target)/debian

.PHONY: all build install install-files uninstall deb deb-package deb-lint capi capi-header install-capi

all: build

build:
	$(CARGO) build --release --locked -p isold -p chisol

# The C library (libtaskisol.so and .a, taskisol.pc) and its example, the latency meter
# isol-meter, linked with the static library so that it runs wherever glibc does (the QEMU
# guests). isol-meter.d lists what it is made of, as cargo's dep-info does for the harness.
capi:
	$(CARGO) build --release --locked -p libtaskisol-c
	$(CC) -O2 -Wall -Wextra -Werror -pthread -Wl,--gc-sections -I $(CAPI)/include/taskisol \
		-o $(RELEASE_DIR)/isol-meter $(CAPI)/examples/isol-meter.c \
		$(RELEASE_DIR)/libtaskisol.a $(CAPI_PRIVATE_LIBS)
	printf '%s: %s %s %s\n' $(abspath $(RELEASE_DIR)/isol-meter) $(abspath $(CAPI)/examples/isol-meter.c) \
		$(abspath $(CAPI)/include/taskisol/taskisol.h) $(abspath $(RELEASE_DIR)/libtaskisol.a) \
		>$(RELEASE_DIR)/isol-meter.d
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@VERSION@|$(CAPI_VERSION)|' -e 's|@PRIVATE@|$(CAPI_PRIVATE_LIBS)|' \
		$(CAPI)/taskisol.pc.in >$(RELEASE_DIR)/taskisol.pc

# The header from the Rust source, by cbindgen (Debian's cbindgen package); committed, and a
# test checks that it is what cbindgen makes.
capi-header:
	cd $(CAPI) && cbindgen --quiet --config cbindgen.toml --crate libtaskisol-c --output include/taskisol/taskisol.h

# As cargo-c installs a C library: the versioned shared library with its soname link and the
# development link, the static library, the header in its own directory, the pkg-config file.
install-capi:
	$(INSTALL) -Dm644 $(RELEASE_DIR)/libtaskisol.so $(DESTDIR)$(LIBDIR)/libtaskisol.so.$(CAPI_VERSION)
	ln -sf libtaskisol.so.$(CAPI_VERSION) $(DESTDIR)$(LIBDIR)/libtaskisol.so.$(CAPI_MAJOR)
	ln -sf libtaskisol.so.$(CAPI_MAJOR) $(DESTDIR)$(LIBDIR)/libtaskisol.so
	$(INSTALL) -Dm644 $(RELEASE_DIR)/libtaskisol.a $(DESTDIR)$(LIBDIR)/libtaskisol.a
	$(INSTALL) -Dm644 $(CAPI)/include/taskisol/taskisol.h $(DESTDIR)$(INCLUDEDIR)/taskisol/taskisol.h
	$(INSTALL) -Dm644 $(RELEASE_DIR)/taskisol.pc $(DESTDIR)$(LIBDIR)/pkgconfig/taskisol.pc
	$(INSTALL) -Dm755 $(RELEASE_DIR)/isol-meter $(DESTDIR)$(BINDIR)/isol-meter

install: build capi install-files install-capi

install-files:
	$(INSTALL) -Dm755 $(RELEASE_DIR)/isold $(DESTDIR)$(BINDIR)/isold
	$(INSTALL) -Dm755 $(RELEASE_DIR)/chisol $(DESTDIR)$(BINDIR)/chisol
	$(INSTALL) -Dm644 man/isold.8 $(DESTDIR)$(MANDIR)/man8/isold.8
	# The items' paragraphs come from their declarations in the library (isold items).
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man5
	$(RELEASE_DIR)/isold items --man-page man/isold.toml.5 >$(DESTDIR)$(MANDIR)/man5/isold.toml.5
	chmod 644 $(DESTDIR)$(MANDIR)/man5/isold.toml.5
	$(INSTALL) -Dm644 man/chisol.1 $(DESTDIR)$(MANDIR)/man1/chisol.1
	# Completions from the programs' own definitions of their commands and options.
	$(INSTALL) -d $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	$(RELEASE_DIR)/isold completions bash >$(DESTDIR)$(BASHCOMPDIR)/isold
	$(RELEASE_DIR)/isold completions zsh >$(DESTDIR)$(ZSHCOMPDIR)/_isold
	$(RELEASE_DIR)/isold completions fish >$(DESTDIR)$(FISHCOMPDIR)/isold.fish
	$(RELEASE_DIR)/chisol --completions bash >$(DESTDIR)$(BASHCOMPDIR)/chisol
	$(RELEASE_DIR)/chisol --completions zsh >$(DESTDIR)$(ZSHCOMPDIR)/_chisol
	$(RELEASE_DIR)/chisol --completions fish >$(DESTDIR)$(FISHCOMPDIR)/chisol.fish
	chmod 644 $(DESTDIR)$(BASHCOMPDIR)/isold $(DESTDIR)$(ZSHCOMPDIR)/_isold $(DESTDIR)$(FISHCOMPDIR)/isold.fish \
		$(DESTDIR)$(BASHCOMPDIR)/chisol $(DESTDIR)$(ZSHCOMPDIR)/_chisol $(DESTDIR)$(FISHCOMPDIR)/chisol.fish
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
		$(DESTDIR)$(SYSCONFDIR)/isold/isold.toml.example $(DESTDIR)$(HOOKSDIR)/isold.json \
		$(DESTDIR)$(BINDIR)/isol-meter $(DESTDIR)$(LIBDIR)/libtaskisol.so* $(DESTDIR)$(LIBDIR)/libtaskisol.a \
		$(DESTDIR)$(LIBDIR)/pkgconfig/taskisol.pc $(DESTDIR)$(INCLUDEDIR)/taskisol/taskisol.h \
		$(DESTDIR)$(BASHCOMPDIR)/isold $(DESTDIR)$(ZSHCOMPDIR)/_isold $(DESTDIR)$(FISHCOMPDIR)/isold.fish \
		$(DESTDIR)$(BASHCOMPDIR)/chisol $(DESTDIR)$(ZSHCOMPDIR)/_chisol $(DESTDIR)$(FISHCOMPDIR)/chisol.fish
	-rmdir $(DESTDIR)$(INCLUDEDIR)/taskisol

# deb-package packages what is built without building, as install-files installs it (the QEMU
# test packages two versions of the same binaries); deb-lint runs Debian's lintian on it
# (installed with apt when missing, as root): errors fail, warnings are printed.
deb: build capi deb-package deb-lint

deb-package:
	scripts/build-deb $(DEB_VERSION) $(DEB_DIR) $(RELEASE_DIR)

deb-lint:
	@command -v lintian >/dev/null || { [ "$$(id -u)" = 0 ] || { echo "make deb-lint: lintian is missing: sudo apt-get install -y lintian" >&2; exit 1; }; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian >/dev/null; }
	lintian --fail-on error $(DEB_DIR)/taskisol_$(DEB_VERSION)_$$(dpkg --print-architecture).deb
