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
  set(${sources_var} ${${sources_var}} ${out} PARENT_SCOPE)
endfunction()
