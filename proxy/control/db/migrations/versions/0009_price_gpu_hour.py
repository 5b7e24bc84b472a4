"""prices.gpu_hour, prices.gpus: a fleet paid by the hour (self-hosted GPUs), a flat cost attributed by tokens

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 20:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('prices') as batch:
        batch.add_column(sa.Column('gpu_hour', sa.String(length=40), nullable=True))
        batch.add_column(sa.Column('gpus', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('prices') as batch:
        batch.drop_column('gpus')
        batch.drop_column('gpu_hour')
