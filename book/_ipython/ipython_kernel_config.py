# IPython kernel configuration. `make venv` copies it to .venv/etc/ipython/, IPython's config
# folder for one environment (sys.prefix/etc/ipython), which every kernel of the venv reads.
#
# Why: ipykernel >= 7.3 warns "Kernel is running over TCP without encryption" at each start.
# The book build (and nbmake, on the trn path) start one local kernel per notebook (about 20 such
# lines per run), and neither lets us configure their kernel manager (its transport or
# transport_encryption).
# This filter drops that one message from the kernel's log; every other message still prints.
# Application.logging_config is traitlets' documented hook: a logging dictConfig merged into the
# default one, whose stderr handler is named "console".
import logging

NOTICE = "Kernel is running over TCP without encryption"


class DropUnencryptedTcpNotice(logging.Filter):
    def filter(self, record):
        return not record.getMessage().startswith(NOTICE)


c = get_config()  # noqa: F821 (defined by IPython's config loader)
c.IPKernelApp.logging_config = {
    "filters": {"drop_tcp_notice": {"()": DropUnencryptedTcpNotice}},
    "handlers": {"console": {"filters": ["drop_tcp_notice"]}},
}
