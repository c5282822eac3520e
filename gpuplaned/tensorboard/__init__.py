"""TensorBoard event files, read without TensorBoard: a node library (no trio, no store).

- ``records``: TFRecord framing and its masked CRC32C;
- ``events``: scalars out of ``Event`` records (every scalar form; other payloads skipped);
- ``reader``: one file read incrementally from an (inode, offset) cursor;
- ``discovery``: a job's event files and its series names;
- ``rewind``: TensorBoard's rule for steps that go back after a restart;
- ``tail``: all of one job's files, pass by pass, with what to store to read each point once.
"""

from gpuplaned.tensorboard.discovery import EventFile as EventFile
from gpuplaned.tensorboard.discovery import Listing as Listing
from gpuplaned.tensorboard.discovery import find_event_files as find_event_files
from gpuplaned.tensorboard.discovery import log_roots as log_roots
from gpuplaned.tensorboard.events import Columns as Columns
from gpuplaned.tensorboard.reader import Cursor as Cursor
from gpuplaned.tensorboard.reader import EventFileReader as EventFileReader
from gpuplaned.tensorboard.reader import Problem as Problem
from gpuplaned.tensorboard.reader import ReadResult as ReadResult
from gpuplaned.tensorboard.rewind import Rewinds as Rewinds
from gpuplaned.tensorboard.rewind import merge as merge
from gpuplaned.tensorboard.tail import FileBatch as FileBatch
from gpuplaned.tensorboard.tail import JobTail as JobTail
