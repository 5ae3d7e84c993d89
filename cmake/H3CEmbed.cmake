# h3c_embed_text(TARGET_SOURCES_VAR NAMESPACE OUT FILES...): adds a build step that embeds FILES as C++ strings
# (cmake/EmbedText.cmake) into OUT and appends OUT to the list variable TARGET_SOURCES_VAR.
function(h3c_embed_text sources_var namespace out)
  set(files ${ARGN})
  string(REPLACE ";" "," files_arg "${files}")
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} "-DOUT=${out}" "-DFILES=${files_arg}" "-DNAMESPACE=${namespace}"
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedText.cmake
    DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/EmbedText.cmake
    COMMENT "Embedding ${namespace} sources" VERBATIM)
  # A utility target of its own, with no dependencies, also builds OUT: Ninja then orders the step after the
  # dependencies the targets that list OUT have in common (none), not after the libraries the consuming library links
  # (it waited for h3c_plan's compile, leaving a core idle for half a minute of the sanitizer build).
  get_filename_component(name ${out} NAME_WE)
  add_custom_target(h3c_embed_${name} DEPENDS ${out})
  set(${sources_var} ${${sources_var}} ${out} PARENT_SCOPE)
endfunction()
