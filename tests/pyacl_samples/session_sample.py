from aclprof.compat import acl
import numpy as np
# ......
# 1.申请运行管理资源，包括设置用于计算的Device、创建Context、创建Stream。
# ......
# 2.模型加载，加载成功后，返回标识模型的model_id。
# ......
# 3.创建aclmdlDataset类型的数据，用于描述模型的输入数据input、输出数据output。
# ......
# 4.profiling初始化。
# 设置数据落盘路径。
PROF_INIT_PATH='...'
ret = acl.prof.init(PROF_INIT_PATH)
# 5.进行profiling配置。
device_list = [0]
ACL_PROF_ACL_API = 0x0001
ACL_PROF_TASK_TIME = 0x0002
ACL_PROF_AICORE_METRICS = 0x0004
ACL_PROF_AICPU_TRACE = 0x0008
ACL_PROF_SYS_HARDWARE_MEM_FREQ = 3
# 创建配置类型指针地址。
prof_config = acl.prof.create_config(device_list, 0, 0, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_AICPU | ACL_PROF_AICORE_METRICS | ACL_PROF_HCCL_TRACE)
mem_freq = "15"
ret = acl.prof.set_config(ACL_PROF_SYS_HARDWARE_MEM_FREQ, mem_freq)
ret = acl.prof.start(prof_config)
# 6.执行模型。
ret = acl.mdl.execute(model_id, input, output)
# 7.处理模型推理结果。
# ......
# 8.释放描述模型输入/输出信息、内存等资源，卸载模型。
# ......
# 9.关闭profiling配置, 释放配置资源, 释放profiling组件资源。
ret = acl.prof.stop(prof_config)
ret = acl.prof.destroy_config(prof_config)
ret = acl.prof.finalize()
# 10.释放运行管理资源
# ......
