# A plugin author's command line: empty overrides, errors reported once.
foreach(case empty_override cli_error)
  mgtrain_e2e_test(plugin_author.${case} 200 ${E2E}/plugin_author.sh ${case})
endforeach()
