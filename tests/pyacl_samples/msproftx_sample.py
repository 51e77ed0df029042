from aclprof.compat import acl


def run():
    for i in range(200000):
        stamp = acl.prof.create_stamp()
        if stamp == 0:
            print("create stamp failed")
            return FAILED

        msg = "test msprof tx"
        msg_len = len(msg)
        ret = acl.prof.set_stamp_trace_message(stamp, msg, msg_len)
        ret = acl.prof.mark(stamp)

        ret = acl.prof.destroy_stamp(stamp)

    # 或

    for i in range(200000):
        stamp = acl.prof.create_stamp()
        if stamp == 0:
            print("create stamp failed")
            return FAILED

        msg = "test msprof tx"
        msg_len = len(msg)
        ret = acl.prof.set_stamp_trace_message(stamp, msg, msg_len)

    ## acl.prof.push 和 acl.prof.pop 接口配对使用，完成单线程采集
        ret = acl.prof.push(stamp)
        ret = acl.prof.pop()

        ret = acl.prof.destroy_stamp(stamp)

    # 或

    for i in range(200000):
        stamp = acl.prof.create_stamp()
        if stamp == 0:
            print("create stamp failed")
            return FAILED

        msg = "test msprof tx"
        msg_len = len(msg)
        ret = acl.prof.set_stamp_trace_message(stamp, msg, msg_len)

    ## acl.prof.range_start 和 acl.prof.range_stop 接口配对使用，可以完成多线程采集
        range_id = 0
        range_id, ret = acl.prof.range_start(stamp)
        ret = acl.prof.range_stop(range_id)

        ret = acl.prof.destroy_stamp(stamp)
