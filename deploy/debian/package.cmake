# The Debian package, built by CPack from the install rules
# (docs/releasing.md):
#
#   cmake -S . -B build-deb -G Ninja -DCMAKE_BUILD_TYPE=Release \
#         -DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF
#   cmake --build build-deb --target package    # build-deb/taskbox_X.Y.Z-1_amd64.deb
#
# What it holds: everything `cmake --install` lays out under /usr, the
# systemd unit in /usr/lib/systemd/system (installed, not enabled), and
# the configuration in /etc/taskbox, each file a conffile: worker.json
# (this directory's, for services on the host), runtimes/*.json (the
# examples) and worker.env (mode 0600: it is where the S3 keys go).
# No system user: the worker runs as root on purpose (docs/concepts.md,
# "The sandbox": it maps each slot onto host ids and writes cgroup limits),
# and every task runs as the unprivileged ids of its own sandbox.
# tests/deploy/package_deb.sh builds it, installs it with dpkg, runs it
# and removes it.

# The unit, its ExecStart naming the taskbox of the prefix it is
# installed under (the install-time one: `cmake --install --prefix P`
# and CPack's /usr included), and its header (how to install it by hand)
# replaced by what applies once installed.
file(READ ${PROJECT_SOURCE_DIR}/deploy/systemd/taskbox-worker.service tb_unit)
string(REPLACE "/usr/local/bin/taskbox" "@TB_BINDIR@/taskbox" tb_unit "${tb_unit}")
string(REGEX REPLACE "^(#[^\n]*\n)+"
       "# A taskbox worker under systemd, installed by `cmake --install` or the\n\
# taskbox package. Configuration: /etc/taskbox/worker.json and\n\
# /etc/taskbox/worker.env (mode 0600, the S3 keys). Then:\n\
#   systemctl enable --now taskbox-worker\n\
# deploy/systemd/taskbox-worker.service in the sources says why each\n\
# setting below is there; the comments that follow are its own.\n"
       tb_unit "${tb_unit}")
file(WRITE ${PROJECT_BINARY_DIR}/systemd/taskbox-worker.service.in "${tb_unit}")
install(CODE "
  set(TB_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  configure_file(\"${PROJECT_BINARY_DIR}/systemd/taskbox-worker.service.in\"
                 \"${PROJECT_BINARY_DIR}/systemd/installed/taskbox-worker.service\" @ONLY)
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\" TYPE FILE
       FILES \"${PROJECT_BINARY_DIR}/systemd/installed/taskbox-worker.service\")
")

# /etc only for a system install (prefix /usr, as GNUInstallDirs has it):
# an install under any other prefix writes nothing outside it.
set(tb_conffiles "")
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/worker.json DESTINATION /etc/taskbox)
  # Debian's place for the licence, machine-readable (DEP-5), naming the
  # licence Debian keeps in common-licenses rather than copying it
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
  # the package's own changelog (the upstream one is changelog.gz), dated
  # by the last commit (SOURCE_DATE_EPOCH wins) so a rebuild is the same
  if(DEFINED ENV{SOURCE_DATE_EPOCH})
    execute_process(COMMAND date -u -R -d @$ENV{SOURCE_DATE_EPOCH} OUTPUT_VARIABLE tb_deb_date
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
  else()
    execute_process(COMMAND git -C ${PROJECT_SOURCE_DIR} log -1 --format=%cD
                    OUTPUT_VARIABLE tb_deb_date OUTPUT_STRIP_TRAILING_WHITESPACE
                    ERROR_QUIET RESULT_VARIABLE tb_git_rc)
    if(NOT tb_git_rc EQUAL 0 OR tb_deb_date STREQUAL "")
      execute_process(COMMAND date -u -R OUTPUT_VARIABLE tb_deb_date
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
    endif()
  endif()
  file(WRITE ${PROJECT_BINARY_DIR}/debian/changelog.Debian
       "taskbox (${PROJECT_VERSION}-1) unstable; urgency=medium\n\n\
  * taskbox ${PROJECT_VERSION}, built from its sources with CPack\n\
    (changelog.gz is the upstream changelog).\n\n\
 -- The taskbox developers <taskbox@example.org>  ${tb_deb_date}\n")
  execute_process(COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/debian/changelog.Debian)
  install(FILES ${PROJECT_BINARY_DIR}/debian/changelog.Debian.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
  # what lintian would say of choices made on purpose, each with its reason
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/lintian-overrides
          DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME taskbox)
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/worker.env.example
          DESTINATION /etc/taskbox RENAME worker.env
          PERMISSIONS OWNER_READ OWNER_WRITE)
  file(GLOB tb_runtimes ${PROJECT_SOURCE_DIR}/examples/runtimes/*.json)
  install(FILES ${tb_runtimes} DESTINATION /etc/taskbox/runtimes)
  set(tb_conffiles "/etc/taskbox/worker.json\n/etc/taskbox/worker.env\n")
  foreach(f ${tb_runtimes})
    get_filename_component(n ${f} NAME)
    string(APPEND tb_conffiles "/etc/taskbox/runtimes/${n}\n")
  endforeach()
endif()
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/debian/conffiles CONTENT "${tb_conffiles}")
foreach(s postinst prerm postrm)
  configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/${s} ${PROJECT_BINARY_DIR}/debian/${s}
                 COPYONLY)
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME taskbox)
set(CPACK_PACKAGE_VENDOR "The taskbox developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "sandboxed agent tasks from Kafka, one namespaced sandbox each")
set(CPACK_PACKAGE_DESCRIPTION
    "A pool of stateless workers: each takes task messages from Kafka, builds\n\
a fresh namespaced Linux sandbox per message, runs the task's agent in it,\n\
streams its conversation as events, saves its files to S3, runs the\n\
recipe's judges and only then acknowledges the message.")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "The taskbox developers <taskbox@example.org>")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Depends: from the shared libraries the programs link (dpkg-shlibdeps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ca-certificates")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "systemd")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_BINARY_DIR}/debian/conffiles;${PROJECT_BINARY_DIR}/debian/postinst;\
${PROJECT_BINARY_DIR}/debian/prerm;${PROJECT_BINARY_DIR}/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
include(CPack)
