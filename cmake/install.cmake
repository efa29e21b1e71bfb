# `cmake --install build --prefix P` and the Debian package (`cpack -G DEB` in build/): the
# same files either way.
#   P/bin/infer                          the chat page is inside it
#   P/share/man/man1/infer.1.gz          from `infer --help` and packaging/infer.h2m (help2man)
#   P/share/infer/cluster.sh             replicas behind HAProxy (it finds P/bin/infer)
#   P/share/infer/deploy/                HAProxy, Prometheus, Dockerfile, Kubernetes
#   P/share/doc/infer/                   README, CHANGELOG, docs/
#   P/lib/systemd/system/infer.service   `infer serve` as the user infer (the package makes it)
#   /etc/default/infer (P/etc/default/infer under a prefix other than /usr)
include(GNUInstallDirs)

install(TARGETS infer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS scripts/cluster.sh DESTINATION ${CMAKE_INSTALL_DATADIR}/infer)
install(FILES deploy/Dockerfile deploy/kubernetes.yaml deploy/haproxy.cfg
  deploy/haproxy-affinity.cfg deploy/prometheus.yml
  DESTINATION ${CMAKE_INSTALL_DATADIR}/infer/deploy)

# Documentation, gzipped as Debian keeps it (the package's changelog and copyright beside it).
set(infer_doc_dir ${PROJECT_BINARY_DIR}/doc)
file(GLOB infer_doc_pages RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/docs/*.md)
set(infer_doc_outputs)
foreach(page README.md CHANGELOG.md ${infer_doc_pages})
  set(output ${infer_doc_dir}/${page}.gz)
  get_filename_component(output_dir ${output} DIRECTORY)
  add_custom_command(OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${output_dir}
    COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/${page} > ${output}
    DEPENDS ${PROJECT_SOURCE_DIR}/${page} VERBATIM)
  list(APPEND infer_doc_outputs ${output})
endforeach()
string(TIMESTAMP INFER_PACKAGE_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
set(CPACK_PACKAGE_CONTACT "infer developers <infer@example.org>")
configure_file(packaging/deb/changelog.in ${infer_doc_dir}/changelog @ONLY)
add_custom_command(OUTPUT ${infer_doc_dir}/changelog.gz
  COMMAND gzip -9nc ${infer_doc_dir}/changelog > ${infer_doc_dir}/changelog.gz
  DEPENDS ${infer_doc_dir}/changelog VERBATIM)
list(APPEND infer_doc_outputs ${infer_doc_dir}/changelog.gz)
add_custom_target(infer_docs ALL DEPENDS ${infer_doc_outputs})
install(FILES ${infer_doc_dir}/README.md.gz ${infer_doc_dir}/CHANGELOG.md.gz
  ${infer_doc_dir}/changelog.gz packaging/deb/copyright
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${infer_doc_dir}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

# The man page: help2man over the built binary (the usage and subcommands of `infer --help`,
# the version line of `infer --version`) plus packaging/infer.h2m (examples, files).
find_program(INFER_HELP2MAN help2man)
if(INFER_HELP2MAN)
  set(infer_man ${PROJECT_BINARY_DIR}/man/infer.1)
  add_custom_command(OUTPUT ${infer_man}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
    COMMAND ${INFER_HELP2MAN} --no-info --no-discard-stderr --section 1
            --include ${PROJECT_SOURCE_DIR}/packaging/infer.h2m --output ${infer_man}
            $<TARGET_FILE:infer>
    COMMAND gzip -9nf ${infer_man}
    DEPENDS infer ${PROJECT_SOURCE_DIR}/packaging/infer.h2m VERBATIM)
  add_custom_target(infer_man ALL DEPENDS ${infer_man}.gz)
  install(FILES ${infer_man}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: no man page (scripts/setup.sh installs it)")
endif()

# The systemd unit and /etc/default/infer, written for the prefix at install time.
install(CODE "
  set(INFER_PACKAGING_DIR \"${PROJECT_SOURCE_DIR}/packaging\")
  set(INFER_STAGING_DIR \"${PROJECT_BINARY_DIR}/packaging\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/install_service.cmake\")")

# The Debian package: infer_<version>_amd64.deb, Depends computed by dpkg-shlibdeps from the
# binary's shared libraries (plus adduser for the maintainer scripts).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME infer)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM inference server for CPUs")
set(CPACK_PACKAGE_DESCRIPTION
  "infer runs Llama 3.x, Qwen3 and Gemma 3 checkpoints (Hugging Face safetensors
or GGUF files) on the CPU, with kernels for AVX2, AVX-512 and AMX chosen at run
time. It tokenizes as Hugging Face does, batches concurrent requests over a
paged KV cache, and serves OpenAI's chat, completions and Responses APIs and
Anthropic's Messages API, with structured output, tool calls, LoRA adapters,
Prometheus metrics and a web chat page.")
# CPack installs into its staging folder through DESTDIR with the prefix /usr, as the
# install-time script (the /etc path) expects.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS adduser)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "haproxy, curl, python3")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/deb/conffiles ${PROJECT_SOURCE_DIR}/packaging/deb/postinst
  ${PROJECT_SOURCE_DIR}/packaging/deb/prerm ${PROJECT_SOURCE_DIR}/packaging/deb/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
