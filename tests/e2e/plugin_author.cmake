# A plugin author's command line: empty overrides, errors reported once, keys of plugins not chosen.
foreach(case empty_override cli_error other_optimizer other_model unknown_in_other)
  mgtrain_e2e_test(plugin_author.${case} 200 ${E2E}/plugin_author.sh ${case})
endforeach()
