# `mgtrain data convert --image-folder` on real PNG/JPEG files written by make_test_image.
foreach(case convert train)
  mgtrain_e2e_test(image_folder.${case} 300 ${E2E}/image_folder.sh ${case})
  set_property(TEST e2e.image_folder.${case} APPEND PROPERTY ENVIRONMENT
    "MAKE_TEST_IMAGE=$<TARGET_FILE:make_test_image>")
endforeach()
