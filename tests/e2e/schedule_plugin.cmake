# Learning-rate schedules (tests/e2e/schedule_plugin.sh): the metrics' lr against the built-in
# cosine's formula; examples/plugin's wsd, built against the installed SDK, trained, checked
# against its formula and resumed to the same bits; bad keys, names, values and rates refused.
foreach(case cosine_lr wsd refused)
  mgtrain_e2e_test(schedule_plugin.${case} 600 ${CMAKE_CURRENT_LIST_DIR}/schedule_plugin.sh ${case})
endforeach()
