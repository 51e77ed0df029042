from aclprof.compat import acl
import numpy as np
# ......
# 1.申请运行管理资源，包括设置用于计算的Device、创建Context、创建Stream。
# ......
# 2.模型加载，加载成功后，返回标识模型的model_id。
# ......
# 3.创建aclmdlDataset类型的数据，用于描述模型的输入数据input、输出数据output。
# ......
# 4.实现异常回调函数。
def exception_callback(info):
    stream_id = acl.rt.get_stream_id_from_exception_info(info)
    thread_id = acl.rt.get_thread_id_from_exception_info(info)
    device_id = acl.rt.get_device_id_from_exception_info(info)
    task_id = acl.rt.get_task_id_from_exception_info(info)
    # 用户可以将获取的算子信息写入到文件，或者另起线程侦听异常回调，当发生异常回调时触发线程处理函数，在线程处理函数中将算子信息打屏。
    op_name, input_desc, num_inputs, output_desc, num_outputs, ret = \
        acl.mdl.create_and_get_op_desc(device_id, stream_id, task_id, 256)
    # 可以调用acl tensor的相关接口，获取算子的相关信息，用户可以根据自己需要调用。
    for i in range(num_inputs):
        desc = acl.get_tensor_desc_by_index(input_desc, i)
        address = acl.get_tensor_desc_address(desc)
        num_dims = acl.get_tensor_desc_num_dims(desc)
        dim_0, ret = acl.get_tensor_desc_dim_v2(desc, 0)
    for i in range(num_outputs):
        desc = acl.get_tensor_desc_by_index(output_desc, i)
        address = acl.get_tensor_desc_address(desc)
        num_dims = acl.get_tensor_desc_num_dims(desc)
        dim_0, ret = acl.get_tensor_desc_dim_v2(desc, 0)
    acl.destroy_tensor_desc(input_desc)
    acl.destroy_tensor_desc(output_desc)
# 5.设置异常回调。
ret = acl.rt.set_exception_info_callback(exception_callback)
# 6.执行模型。
ret = acl.mdl.execute(model_id, input, output)
# 7.处理模型推理结果。
# ......
# 8.释放描述模型输入/输出信息、内存等资源，卸载模型。
# ......
# 9.释放运行管理资源。
# ......
