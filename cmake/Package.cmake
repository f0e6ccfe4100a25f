# `cmake --install` and `make deb` (CPack's DEB generator, issue #22).
#
# Layout under the prefix (/usr for the package, /usr/local by default):
#   bin/stallwatch
# and /lib/systemd/system/stallwatch.service (ExecStart at bin/stallwatch; installed disabled)
#   share/stallwatch/{dashboards,alerts}      Grafana dashboards, Prometheus rules and tests
#   share/doc/stallwatch/runbooks             one page per alert
#   share/man/man8/stallwatch.8.gz            generated from every subcommand's --help
#   share/bash-completion/completions/stallwatch   commands, flags and demo scenarios, asked of
#                                             the binary (packaging/completion/stallwatch.bash)
# and outside it (conffiles in the package): /etc/default/stallwatch and
# /etc/stallwatch/stallwatch.conf. /var/lib/stallwatch is the unit's StateDirectory.
# Runtime Depends come from dpkg-shlibdeps over the binary, never typed here.
include(GNUInstallDirs)


# The man page: help2man over `stallwatch --help`, with every subcommand's --help as sections.
find_program(HELP2MAN help2man)
find_program(GZIP gzip REQUIRED)
set(STALLWATCH_MAN "${STALLWATCH_GENERATED}/stallwatch.8")
if(HELP2MAN)
  add_custom_command(OUTPUT "${STALLWATCH_MAN}" "${STALLWATCH_MAN}.gz"
    COMMAND bash "${CMAKE_SOURCE_DIR}/scripts/manpage.sh" "$<TARGET_FILE:stallwatch>"
            "${STALLWATCH_MAN}"
    COMMAND "${GZIP}" -9nkf "${STALLWATCH_MAN}"
    DEPENDS stallwatch "${CMAKE_SOURCE_DIR}/scripts/manpage.sh"
    COMMENT "Man page from --help (help2man)" VERBATIM)
  add_custom_target(manpage ALL DEPENDS "${STALLWATCH_MAN}.gz")
  install(FILES "${STALLWATCH_MAN}.gz" DESTINATION "${CMAKE_INSTALL_MANDIR}/man8")
else()
  message(WARNING "help2man not found: no man page (scripts/install-deps.sh installs it)")
endif()

install(TARGETS stallwatch RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
install(FILES packaging/completion/stallwatch.bash
        DESTINATION "${CMAKE_INSTALL_DATADIR}/bash-completion/completions" RENAME stallwatch)
# The unit as installed runs the installed binary: its path is known at install time only
# (cmake --install --prefix, or /usr in the package), so the unit is written then.
install(CODE "
  file(READ \"${CMAKE_SOURCE_DIR}/deploy/systemd/stallwatch.service\" _unit)
  string(REPLACE \"/usr/local/bin/stallwatch\" \"\${CMAKE_INSTALL_PREFIX}/bin/stallwatch\" _unit
         \"\${_unit}\")
  file(WRITE \"${STALLWATCH_GENERATED}/installed/stallwatch.service\" \"\${_unit}\")
")
install(FILES "${STALLWATCH_GENERATED}/installed/stallwatch.service" DESTINATION /lib/systemd/system)
# A daemon's settings live in /etc whatever the prefix (conffiles in the package).
install(FILES deploy/systemd/stallwatch.default DESTINATION /etc/default RENAME stallwatch)
install(FILES deploy/systemd/stallwatch.conf DESTINATION /etc/stallwatch)
install(DIRECTORY dashboards/ DESTINATION "${CMAKE_INSTALL_DATADIR}/stallwatch/dashboards"
        FILES_MATCHING PATTERN "*.json" PATTERN "*.md")
install(DIRECTORY alerts/ DESTINATION "${CMAKE_INSTALL_DATADIR}/stallwatch/alerts"
        FILES_MATCHING PATTERN "*.yml" PATTERN "*.md" PATTERN "tests" EXCLUDE)
install(DIRECTORY docs/runbooks/ DESTINATION "${CMAKE_INSTALL_DOCDIR}/runbooks")
install(FILES packaging/copyright DESTINATION "${CMAKE_INSTALL_DOCDIR}")
install(FILES "${STALLWATCH_GENERATED}/changelog.gz" DESTINATION "${CMAKE_INSTALL_DOCDIR}")

# A Debian changelog (lintian requires one), written for the version being packaged by
# cmake/CPackProject.cmake when cpack runs; here only so that `cmake --install` has one.
set(CPACK_STALLWATCH_SOURCE_DIR "${CMAKE_SOURCE_DIR}")
set(CPACK_STALLWATCH_GENERATED "${STALLWATCH_GENERATED}")
set(CPACK_STALLWATCH_BASE_VERSION "${PROJECT_VERSION}")
set(STALLWATCH_GIT_VERSION_FUNCTION_ONLY ON)
set(CPACK_PACKAGE_VERSION "${STALLWATCH_FULL_VERSION}")
include(cmake/CPackProject.cmake)
unset(STALLWATCH_GIT_VERSION_FUNCTION_ONLY)
set(CPACK_PROJECT_CONFIG_FILE "${CMAKE_SOURCE_DIR}/cmake/CPackProject.cmake")

# CPack: build/stallwatch_<version>_<arch>.deb
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME stallwatch)
set(CPACK_PACKAGE_CONTACT "stallwatch developers <stallwatch@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "eBPF daemon that explains slow CUDA calls by host contention")
# CPack puts the summary above this as the synopsis line.
string(CONCAT CPACK_PACKAGE_DESCRIPTION
  "stallwatch traces CUDA runtime, driver and NCCL calls with uprobes and\n"
  "the Linux scheduler and host events with tracepoints, joins them per\n"
  "thread, and turns the join into causal chains: a slow\n"
  "cudaStreamSynchronize because the process waited for a CPU, preempted\n"
  "by a named process, and how to fix it. It keeps the chains in a local\n"
  "SQLite store and exports per-cgroup histograms and chain counters to\n"
  "Prometheus and OTLP.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Installed with DESTDIR and CMAKE_INSTALL_PREFIX=/usr, so the unit written at install time
# names /usr/bin/stallwatch.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/stallwatch/stallwatch")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${CMAKE_SOURCE_DIR}/packaging/conffiles;${CMAKE_SOURCE_DIR}/packaging/postinst;${CMAKE_SOURCE_DIR}/packaging/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
include(CPack)
