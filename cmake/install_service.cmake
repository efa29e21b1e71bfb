# Install-time part of the install rules (install(CODE) includes it, so CMAKE_INSTALL_PREFIX is
# the prefix installed to: /usr for the Debian package, P for `cmake --install build --prefix P`).
# The systemd unit names the installed binary and environment file; under the prefix /usr the
# environment file is /etc/default/infer (the FHS place), under any other prefix P/etc/default.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(infer_etc "/etc")
else()
  set(infer_etc "${CMAKE_INSTALL_PREFIX}/etc")
endif()
set(INFER_BINARY "${CMAKE_INSTALL_PREFIX}/bin/infer")
set(INFER_ENVIRONMENT_FILE "${infer_etc}/default/infer")
configure_file("${INFER_PACKAGING_DIR}/infer.service.in" "${INFER_STAGING_DIR}/infer.service"
  @ONLY)
file(INSTALL "${INFER_STAGING_DIR}/infer.service"
  DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" FILE_PERMISSIONS OWNER_READ
  OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL "${INFER_PACKAGING_DIR}/infer.default" DESTINATION "${infer_etc}/default"
  RENAME infer FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
