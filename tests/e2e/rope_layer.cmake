# A layer with constants computed on the host (examples/plugin's rope, LayerPlanner::upload_array):
# its gradients, deterministic bits, and the GPU path's program.
mgtrain_e2e_test(rope_layer.deterministic 600 ${CMAKE_CURRENT_LIST_DIR}/rope_layer.sh)
