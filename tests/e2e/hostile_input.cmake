# Inputs that once crashed, hung or were ignored (tests/e2e/hostile_input.sh): each is refused with
# one error line naming it.
foreach(case truncated_plugin special_config special_data model_sizes eval_batch idx_header resume_empty positional
             plugin_path_unreadable compare_tolerance
             symlink_loop control_output)
  mgtrain_e2e_test(hostile_input.${case} 300 ${E2E}/hostile_input.sh ${case})
endforeach()
# Root runs the unreadable --plugin-path case as nobody; where nobody cannot run the build, it skips.
set_tests_properties(e2e.hostile_input.plugin_path_unreadable PROPERTIES SKIP_RETURN_CODE 77)
